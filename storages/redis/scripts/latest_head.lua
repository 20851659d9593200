-- The head of a workflow's top index alone (lineage.lua's latest_of), false for none: the answer
-- of a cluster fence whose id the client found stored under another workflow before any script
-- ran (storages/redis/commit.py). Read only; a lost record is named, as every fence names it.
return latest_of(home_tag, index, false, false)
