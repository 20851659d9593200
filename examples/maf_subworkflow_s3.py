"""A MAF parent workflow with a sub-workflow, checkpointed to S3 and resumed mid-run.

Run: ``python examples/maf_subworkflow_s3.py``. It starts moto's S3 server in this process on a
loopback port (``pip install 'moto[server]'``), so no AWS account is needed; against real S3,
drop the server and the endpoint URL.
"""

import asyncio
import logging
import os

from maf_subworkflow_common import run_then_resume
from moto.server import ThreadedMotoServer

from storages import open_storage


async def main(endpoint_url: str) -> None:
    async with open_storage(
        f"s3://maf-example/checkpoints?endpoint_url={endpoint_url}&region=us-east-1&create_bucket=true"
    ) as storage:
        await run_then_resume(storage)


if __name__ == "__main__":
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(variable, "testing")  # moto accepts any credentials
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's request log
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    try:
        host, port = server.get_host_and_port()
        asyncio.run(main(f"http://{host}:{port}"))
    finally:
        server.stop()
