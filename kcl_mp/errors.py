"""kcl-mp's errors, sorted by what the caller should do.

    KclMpError                      base; ``retriable`` says whether trying again may help
     ├─ ConfigError                 the properties file or command line is wrong: stop the host, exit 1
     ├─ ProcessorError              a processor child broke its contract: restart that shard only
     │   ├─ ProcessorStartError     the executable cannot be started (missing, not executable)
     │   ├─ ProcessorExitedError    the child's stdout ended while a reply was awaited, or its stdin
     │   │                          broke (a write to a closed pipe)
     │   ├─ ProcessorTimeoutError   no line within timeoutInSeconds
     │   └─ ProtocolError           a status for the wrong action (responseFor), too many unasked messages
     └─ DependencyError             AWS said no or did not answer (retriable unless it says otherwise)
         └─ ThrottledError          throughput exceeded: back off and retry

botocore errors are translated to these in one place (``kcl_mp.aws.translate``); a lost
race on a conditional write is not an error but a ``False`` result of the lease-table call,
and a checkpoint not stored is a ``CheckpointOutcome`` (multilang names it for the processor).

Exit statuses, named once: the host's (``kcl-mp``; the CLI is the one place an error
becomes one) and a shard driver's (the supervisor's restart policy reads them).
"""

from __future__ import annotations

from enum import Enum

EXIT_OK = 0  # host: a graceful stop; shard: done (lease lost, shutdown, shard end)
EXIT_CONFIG = 1  # host: a configuration or start-up error, or a shard that cannot run (check-processor: a failure)
EXIT_USAGE = 2  # host: a command-line error (argparse's own status)
EXIT_START = 3  # shard: the processor cannot start: stop the host
EXIT_PROCESSOR = 4  # shard: the child broke the protocol: restart that shard with backoff
EXIT_DEPENDENCY = 5  # shard: AWS kept failing: restart that shard with backoff
EXIT_INTERNAL = 70  # host: a bug kcl-mp could not go on after (logged with its traceback; leases released,
#                    pool processes ended): restart (sysexits' EX_SOFTWARE)


class KclMpError(Exception):
    retriable: bool = False


class ConfigError(KclMpError):
    """A bad properties file, key or value. The message names the key, value, file and line."""


class ProcessorError(KclMpError):
    retriable = True


class ProcessorStartError(ProcessorError):
    retriable = False


class ProcessorExitedError(ProcessorError):
    pass


class ProcessorTimeoutError(ProcessorError):
    pass


class ProtocolError(ProcessorError):
    pass


class DependencyError(KclMpError):
    retriable = True

    def __init__(self, message: str, *, retriable: bool = True, code: str | None = None):
        super().__init__(message)
        self.retriable = retriable
        self.code = code


class ThrottledError(DependencyError):
    pass


class CheckpointOutcome(Enum):
    """Why the lease table did not store a checkpoint (``None`` when it did).
    ``multilang.wire.checkpoint_error`` names each for the processor."""

    LEASE_MOVED = "lease moved"  # the lease is no longer this worker's
    INVALID_STATE = "invalid state"  # the lease is at SHARD_END already, or its table is gone
    THROTTLED = "throttled"  # DynamoDB throttled the write: the processor may retry
    FAILED = "failed"  # DynamoDB failed otherwise
