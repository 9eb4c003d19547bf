"""lowbit on a Dask cluster (`dask.distributed`): calibration profiles taken in shards on many
workers and merged exactly, and the candidate evaluations of sensitivity and of the budget
search spread over the same workers. `connect("local:2")` starts a local cluster of worker
processes; `connect("tcp://scheduler:8786")` joins a running one."""
