"""Tell a `larder mount` the order a rank reads a mounted HDF5 file in.

    larder.mount.register_order(path, sampler, batch_size, group=None,
                                dataset=None, window=None)
        path: an HDF5 file under a larder mount; sampler: the rank's
        torch.utils.data.DistributedSampler over the file's members (one
        group per sample, in name order, as h5py lists them) or, with
        dataset=, over the rows of that dataset; batch_size: the
        DataLoader's (this rank's) batch.  Call it at each epoch, after
        sampler.set_epoch(epoch) and before the epoch's first read.
    larder.mount.order_status(path)
        what the mount reports of the orders registered for that file
    larder.torch.MountOrderSampler
        a DistributedSampler that does the registration itself each epoch

The mount then stages each rank's next `window` steps (8 by default)
ahead of its reads, as docs/mount.md ("A registered row order for an HDF5
file") describes: the line written here is the one that section names,
written to the mount's control file MOUNT/.larder-order.  Only the order
of PyTorch's DistributedSampler(shuffle=True, drop_last=False) is known
to the mount; any other sampler is refused here with the reason.  Nothing
here is needed for correctness: a wrong order only stages other bytes.
"""

import errno
import os

CONTROL = ".larder-order"  # src/mount/mount.h, LARDER__MOUNT_ORDER_FILE


def _mount_of(path):
    """(the larder mount's root, path relative to it) for a file under one."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(errno.ENOENT, "no such file", path)
    d = os.path.dirname(path)
    while True:
        # the control file is at a larder mount's root and nowhere else;
        # readdir does not list it, but it can be looked up
        if os.path.ismount(d) and os.path.exists(os.path.join(d, CONTROL)):
            return d, os.path.relpath(path, d)
        parent = os.path.dirname(d)
        if parent == d:
            raise ValueError(f"{path}: not on a larder mount (no {CONTROL} at any mount "
                             "point above it)")
        d = parent


def _word(name, value):
    """name=value as the control file's words take it (split at white space)."""
    value = str(value)
    if not value or any(c.isspace() for c in value) or len(value.encode()) > 255:
        raise ValueError(f"{name}={value!r}: the mount's control file takes 1 to 255 bytes "
                         "without white space")
    return f"{name}={value}"


def order_line(file, sampler, batch_size, group=None, dataset=None, window=None):
    """The control file's line for this rank's epoch (register_order writes it)."""
    for attribute in ("seed", "epoch", "rank", "num_replicas", "shuffle", "drop_last"):
        if not hasattr(sampler, attribute):
            raise TypeError(f"{type(sampler).__name__} has no {attribute}: a torch "
                            "DistributedSampler is the order the mount knows")
    if not sampler.shuffle:
        raise ValueError("DistributedSampler(shuffle=False): the mount knows the shuffled order "
                         "only (a sequential read is served by the mount's read-ahead)")
    if sampler.drop_last:
        raise ValueError("DistributedSampler(drop_last=True): the mount knows the padded order "
                         "(drop_last=False) only")
    if group is not None and dataset is not None:
        raise ValueError("group= or dataset=, not both")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}: the DataLoader's batch, 1 or more")
    world = int(sampler.num_replicas)
    words = [_word("file", file), "sampler=torch", f"seed={int(sampler.seed)}",
             f"epoch={int(sampler.epoch)}", f"rank={int(sampler.rank)}", f"world={world}",
             f"batch={batch_size * world}"]
    if group is not None:
        words.append(_word("group", group))
    if dataset is not None:
        words.append(_word("dataset", dataset))
    if window is not None:
        if not isinstance(window, int) or not 1 <= window <= 1024:
            raise ValueError(f"window={window!r}: 1 to 1024 steps")
        words.append(f"window={window}")
    return " ".join(words) + "\n"


def register_order(path, sampler, batch_size, group=None, dataset=None, window=None):
    """Register this rank's order of the epoch at hand for the mounted file
    `path` (module doc).  Returns the line written.  A mount that refuses it
    (a file that is not HDF5 is reported later, by order_status) raises
    OSError; the mount's log says why."""
    root, file = _mount_of(path)
    line = order_line(file, sampler, batch_size, group=group, dataset=dataset, window=window)
    control = os.path.join(root, CONTROL)
    try:
        with open(control, "w") as f:
            f.write(line)
    except OSError as e:
        raise OSError(e.errno, f"{root}: the mount refused the order {line.strip()!r} "
                      "(its log says why)", control) from None
    return line


def order_status(path):
    """The mount's report of each order registered for the mounted file
    `path`: a list of dicts of its words (file, sampler, seed, epoch, rank,
    world, batch, window, members, read, staged, staged_bytes as ints where
    numbers) and 'state': 'listing' (its members not yet listed), 'failed'
    or 'ready'."""
    root, file = _mount_of(path)
    with open(os.path.join(root, CONTROL)) as f:
        text = f.read()
    found = []
    for line in text.splitlines():
        entry, state = {}, "ready"
        for word in line.split():
            name, sep, value = word.partition("=")
            if not sep:
                state = word
                continue
            entry[name] = int(value) if value.isdigit() else value
        if entry.get("file") == file:
            entry["state"] = state
            found.append(entry)
    return found
