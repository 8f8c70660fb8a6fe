"""Loopback TCP ports a test holds until it ends, never another test's.

The Python side of tests/cli/lib.sh's reserve_ports, with the same locks:
each port is locked (flock) in LARDER_TEST_PORTS (/tmp/larder-test-ports)
by the process that reserved it, so that tests running at once (in one
checkout or several, as one user or another) never take the same port; a
port another program holds is passed over (bound for a moment on 0.0.0.0
first).  Ports are drawn below Linux's ephemeral range (32768 and up),
which the daemons' own outgoing connections take.
"""

import fcntl
import os
import random
import socket

LOCKS = os.environ.get("LARDER_TEST_PORTS", "/tmp/larder-test-ports")


def bindable(base, count):
    """Whether ports base..base+count-1 can all be bound now."""
    for port in range(base, base + count):
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # no SO_REUSEADDR: TIME_WAIT is passed over too
            except OSError:
                return False
    return True


class Reservation:
    """count ports from .base on, held until close() (or the process ends)."""

    def __init__(self, count, candidates=None, tries=200):
        locks = LOCKS
        os.makedirs(locks, exist_ok=True)
        try:
            os.chmod(locks, 0o1777)
        except OSError:
            pass  # another user's directory: its mode is theirs to set
        st = os.lstat(locks)
        if not os.path.isdir(locks) or os.path.islink(locks) or st.st_uid not in (0, os.getuid()):
            # another user's (or a link): not trusted with our files (lib.sh does the same)
            locks = "%s-%d" % (LOCKS, os.getuid())
            os.makedirs(locks, exist_ok=True)
        bases = list(candidates) if candidates is not None else [
            20000 + random.randrange(12000 - count) for _ in range(tries)]
        for base in bases:
            files = []
            for port in range(base, base + count):
                path = os.path.join(locks, str(port))
                try:  # read-only: another user's lock file (mode 644) locks as well;
                    # never through a link, made readable by all whatever the umask
                    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 0o644)
                    if os.fstat(fd).st_uid == os.getuid():
                        os.fchmod(fd, 0o644)
                    f = os.fdopen(fd, "r")
                except OSError:
                    break
                files.append(f)
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    break
            else:
                if bindable(base, count):
                    self.base, self._files = base, files
                    return
            for f in files:
                f.close()
        raise RuntimeError("no %d free ports in %d tries" % (count, len(bases)))

    def close(self):
        for f in self._files:
            f.close()
        self._files = []
