"""kcl-mp's errors, sorted by what the caller should do.

    KclMpError                      base; ``retriable`` says whether trying again may help
     ├─ ConfigError                 the properties file or command line is wrong: stop the host, exit 1
     ├─ ProcessorError              a processor child broke its contract: restart that shard only
     │   ├─ ProcessorStartError     the executable cannot be started (missing, not executable)
     │   ├─ ProcessorExitedError    the child's stdout ended while a reply was awaited
     │   ├─ ProcessorTimeoutError   no line within timeoutInSeconds
     │   └─ ProtocolError           wrong responseFor, a write to a closed pipe
     ├─ LeaseLostError              this worker no longer owns the lease: stop the shard, never retry
     └─ DependencyError             AWS said no or did not answer (retriable unless it says otherwise)
         └─ ThrottledError          throughput exceeded: back off and retry

botocore errors are translated to these in one place (``kcl_mp.aws.translate``); a lost
race on a conditional write is not an error but a ``False`` result of the lease-table call.
"""

from __future__ import annotations


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


class LeaseLostError(KclMpError):
    pass


class DependencyError(KclMpError):
    retriable = True

    def __init__(self, message: str, *, retriable: bool = True, code: str | None = None):
        super().__init__(message)
        self.retriable = retriable
        self.code = code


class ThrottledError(DependencyError):
    pass
