"""The safe checkpoint codec: msgpack with typed extensions, no pickle.

A body is ``payload + trailer`` (storages/codec/frame.py): flags, a checksum of the payload
(XXH3-64 seeded with the flags), the format version and a magic, so damaged bytes are detected
instead of decoded into silently different data; bodies of versions 1 and 2, ``header + payload``
(CRC-32 and XXH3-64), still read. The
payload is msgpack; every non-JSON type travels as an extension whose code names the type
(storages/codec/values.py), so a user dict can never be mistaken for an envelope.

Encoding is native first (storages/codec/packing.py): ormsgpack walks the value and calls back
only for the types that need an extension; what it cannot write faithfully is redone by the
exact Python walk, which writes the same bytes. Decoding is msgspec with an extension hook
(storages/codec/decoding.py) and only ever constructs built-in value types, the checkpoint
classes and the types on the codec's allow-list (storages/codec/registry.py and
storages/allowlist.py), objects from their stored state as pickle does, never through their
constructors (storages/codec/objects.py). A type that is not allowed fails at save time, naming
the type, where in the checkpoint it sits and the option that allows it; a stored body naming a
type that is not allowed raises CheckpointTypeNotAllowedError (the data is intact), never
CheckpointCorruptedError. A save refuses what a load would refuse, and two values are the same
when they would be stored alike (storages/codec/fidelity.py); how deep a value may nest, and work
that runs out of stack, are in storages/codec/stack.py.

Decoding is bounded: a body is at most ``max_payload_bytes`` once decompressed, a compressed
payload must declare its size and expand at most ``max_compression_ratio`` times, and msgpack
lengths are checked against the bytes present before anything is allocated.

Checkpoints embedded in a checkpoint (a sub-workflow's state inside its parent's) are encoded in
one of two ways. :meth:`CheckpointCodec.encode_checkpoint` writes them inline. A storage that keeps
nested records uses :meth:`CheckpointCodec.encode_checkpoint_tree` instead: every embedded
checkpoint becomes a body of its own, the container holds only a reference to its id, and the
``nested refs`` flag says the body needs those records to decode.

Integrations extend every codec through storages/codec/plugins.py (MAF's types do, from
storages/runners/maf.py); the codec imports none of them.
"""

from __future__ import annotations

from .codec import CheckpointCodec
from .frame import DEFAULT_MAX_COMPRESSION_RATIO, DEFAULT_MAX_PAYLOAD_BYTES, HEADER_SIZE, TRAILER_SIZE
from .plugins import CodecPlugin, register_codec_plugin
from .vocabulary import EncodedCheckpoint, OpaqueValue, TypeRef, Unencodable, type_key

__all__ = [
    "DEFAULT_MAX_COMPRESSION_RATIO",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "HEADER_SIZE",
    "TRAILER_SIZE",
    "CheckpointCodec",
    "CodecPlugin",
    "EncodedCheckpoint",
    "OpaqueValue",
    "TypeRef",
    "Unencodable",
    "register_codec_plugin",
    "type_key",
]
