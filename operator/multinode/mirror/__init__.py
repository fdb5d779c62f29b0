"""The runtime of a job's mirror pod: the checkpoint engine in a loop, reporting into the job's status."""
