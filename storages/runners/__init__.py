"""Runner adapters: each maps one workflow runner's checkpoints onto a storage of this project.

MAF's codec plug-in (:mod:`.maf`; ``import storages`` registers it), LangGraph's checkpointer
(:mod:`.langgraph`), CrewAI Flows' persistence (:mod:`.crewai`) and Apache Burr's persisters
(:mod:`.burr`), with what more than one adapter needs: the heads a run remembers (:mod:`.heads`)
and the private event loop of a sync adapter (:mod:`.loop_thread`). Nothing here is imported
until asked for, since each adapter needs its runner installed.
"""
