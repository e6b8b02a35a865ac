"""The system calls a kernel may make: those kernels were recorded
making, within Docker's default seccomp profile.

A kernel's system calls are an allow-list: the calls kernels were seen
making (``seccomp-kernel.json``, per machine, written by
``scripts/record_syscalls.py`` from ``strace`` over every chapter's
solution and the usual libraries: :mod:`.syscalls`), each on the terms
of an established profile, the one Docker and Moby apply to every
container,
``seccomp-default.json`` (moby/profiles, ``seccomp/default.json`` at
commit cd3bed8, 2026-06-30; Apache License 2.0), read as Docker reads it
(moby/profiles ``seccomp_linux.go``) for a process on this machine with
no capability at all:

- a system call no kernel was recorded making fails with EPERM (where a
  machine has no recording, Docker's whole profile applies), as does one
  the profile does not name: ``unshare``,
  ``setns``, ``mount`` and the new mount API, ``bpf``, ``keyctl``,
  ``add_key``, ``request_key``, ``perf_event_open``, ``io_uring_*``,
  ``userfaultfd``, ``ptrace`` (with ``process_vm_readv``, ``kcmp``,
  ``pidfd_getfd``), ``mbind``, ``chroot``, ``pivot_root``, modules...;
- ``inotify_*`` and ``fanotify_*`` fail with EPERM too (``WITHHELD``:
  taken out of the profile's allow-list);
- ``clone`` is allowed only without a namespace flag (``CLONE_NEWNS``,
  ``NEWUTS``, ``NEWIPC``, ``NEWUSER``, ``NEWPID``, ``NEWNET``,
  ``NEWCGROUP``), ``clone3`` fails with ENOSYS (its flags are in memory a
  filter cannot read; the C library falls back to ``clone``), ``socket``
  refuses ``AF_VSOCK``, ``personality`` takes only the usual personas;
- entries that need a capability (``CAP_SYS_ADMIN``, ``CAP_SYS_PTRACE``,
  ...) never apply, since the kernel has none; entries for another
  architecture neither;
- only this machine's ABI is allowed (Docker also allows the 32-bit
  ones): a call through another fails with EPERM;
- as runc does, a system call newer than every one the profile names
  fails with ENOSYS, so that a library falls back as on an older kernel.

libseccomp (the C library every container runtime uses; ``libseccomp2``,
which Debian's ``apt`` depends on) compiles the rules into a BPF program,
once per process (:func:`program`: the zygote compiles it before any
request), and :func:`apply` loads it with ``prctl``; the filter is
inherited by every process the kernel starts and cannot be removed.
``tests/test_isolation.py`` shows that a child of a kernel cannot create
a namespace, mount, load BPF or touch a keyring, and that an honest
chapter still grades fully.
"""

import ctypes
import ctypes.util
import errno
import json
import os
import platform
from pathlib import Path

PROFILE = Path(__file__).with_name("seccomp-default.json")
# What kernels call, recorded (scripts/record_syscalls.py): the names of
# Docker's profile a kernel keeps, per machine
RECORDED = Path(__file__).with_name("seccomp-kernel.json")
# machine -> (Docker's name of the architecture, AUDIT_ARCH_*)
ARCHES = {"x86_64": ("amd64", 0xC000003E),
          "aarch64": ("arm64", 0xC00000B7)}
OPERATORS = {"SCMP_CMP_NE": 1, "SCMP_CMP_LT": 2, "SCMP_CMP_LE": 3,
             "SCMP_CMP_EQ": 4, "SCMP_CMP_GE": 5, "SCMP_CMP_GT": 6,
             "SCMP_CMP_MASKED_EQ": 7}
ALLOW = 0x7FFF0000
ATTRIBUTE_BAD_ARCH, ATTRIBUTE_OPTIMIZE = 2, 8
X32 = 0x40000000  # x86_64's x32 system call numbers
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_PROGRAM = {}
# Taken out of the profile's allow-list: watching files reaches across
# kernels (one kernel saw another's and the grader's opens of the shared,
# read-only Python installation through inotify), and no kernel of the
# course needs it; fanotify needs a capability a kernel never has.
WITHHELD = frozenset({"inotify_init", "inotify_init1", "inotify_add_watch",
                      "inotify_rm_watch", "fanotify_init",
                      "fanotify_mark"})


class Unavailable(OSError):
    """The filter cannot be built or loaded here."""


def errno_action(number):
    """libseccomp's ``SCMP_ACT_ERRNO(number)``."""
    return 0x00050000 | (number & 0xFFFF)


def _kernel_at_least(version):
    """Whether this machine's kernel is ``version`` ("4.8") or newer."""
    def parts(text):
        return [int(p) for p in text.split("-")[0].split(".")[:2]]

    return parts(platform.release()) >= parts(version)


def _applies(condition, arch, include):
    """Whether a profile entry's ``includes`` (``include``) or
    ``excludes`` condition keeps it, for ``arch`` and no capability."""
    if not condition:
        return True
    arches, caps = condition.get("arches"), condition.get("caps")
    kernel = condition.get("minKernel")
    if include:
        return not caps and (not arches or arch in arches) and (
            not kernel or _kernel_at_least(kernel))
    return not (arches and arch in arches) and not (
        kernel and _kernel_at_least(kernel))


def recorded(machine=None, path=None):
    """The system calls kernels were recorded making on ``machine``
    (a ``frozenset`` of names), or None where none were recorded."""
    machine = machine or platform.machine()
    try:
        data = json.loads(Path(path or RECORDED).read_text())
    except FileNotFoundError:
        return None
    entry = data["machines"].get(machine)
    return None if entry is None else frozenset(entry["allowed"])


def rules(profile=None, machine=None, allowed="recorded"):
    """``(default action, [(names, action, args), ...])`` of the
    profile (a path; the vendored one by default) for ``machine`` and no
    capability, keeping only the names in ``allowed``: by default what
    kernels were recorded calling on ``machine`` (:func:`recorded`),
    None for the whole profile (also where nothing was recorded);
    ``args`` are ``(index, operator, value, value_two)``."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise Unavailable(f"no seccomp profile for {machine}")
    arch = ARCHES[machine][0]
    if allowed == "recorded":
        allowed = recorded(machine)
    data = json.loads(Path(profile or PROFILE).read_text())
    default = _action(data["defaultAction"], data.get("defaultErrnoRet"))
    found = []
    for entry in data["syscalls"]:
        if not (_applies(entry.get("includes"), arch, True)
                and _applies(entry.get("excludes"), arch, False)):
            continue
        action = _action(entry["action"], entry.get("errnoRet"))
        # (an entry that refuses, with its own errno, is kept whole)
        names = [n for n in entry.get("names") or [entry["name"]]
                 if n not in WITHHELD and (allowed is None or n in allowed
                                           or action != ALLOW)]
        if not names:
            continue
        args = tuple((a["index"], OPERATORS[a["op"]], a["value"],
                      a.get("valueTwo", 0)) for a in entry.get("args")
                     or ())
        found.append((tuple(names), action, args))
    return default, found


def _action(name, number=None):
    if name == "SCMP_ACT_ALLOW":
        return ALLOW
    if name == "SCMP_ACT_ERRNO":
        return errno_action(errno.EPERM if number is None else number)
    raise Unavailable(f"the profile's action {name} is not supported")


class _Argument(ctypes.Structure):  # struct scmp_arg_cmp
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


class _Filter(ctypes.Structure):  # struct sock_filter
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):  # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort),
                ("filter", ctypes.POINTER(_Filter))]


def _library():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as error:
        raise Unavailable(f"libseccomp is not installed ({error})") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                     ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
        ctypes.POINTER(_Argument)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def _newer_than(highest, machine):
    """BPF instructions that answer ENOSYS to a system call of this
    machine's ABI numbered above ``highest``, put before libseccomp's
    program (whose jumps are relative, so it is unchanged)."""
    load, jeq, jgt, jge, ret = 0x20, 0x15, 0x25, 0x35, 0x06
    audit = ARCHES[machine][1]
    return [(load, 0, 0, 4),  # the calling ABI
            (jeq, 0, 4, audit),  # another: libseccomp decides
            (load, 0, 0, 0),  # the system call's number
            (jgt, 0, 2, highest),  # known: libseccomp decides
            (jge, 1, 0, X32),  # an x32 number: libseccomp decides
            (ret, 0, 0, errno_action(errno.ENOSYS))]


def compile_profile(profile=None, machine=None):
    """The profile's BPF program for this machine: ``bytes`` of
    ``struct sock_filter``."""
    machine = machine or platform.machine()
    default, found = rules(profile, machine)
    lib = _library()
    # calls the whole profile knows, allowed or not, answer EPERM; newer
    # ones ENOSYS (below)
    highest = max((lib.seccomp_syscall_resolve_name(name.encode())
                   for names, _, _ in rules(profile, machine, None)[1]
                   for name in names), default=0)
    context = lib.seccomp_init(default)
    if not context:
        raise Unavailable("seccomp_init failed")
    try:
        lib.seccomp_attr_set(context, ATTRIBUTE_BAD_ARCH,
                             errno_action(errno.EPERM))
        lib.seccomp_attr_set(context, ATTRIBUTE_OPTIMIZE, 2)  # a tree
        for names, action, args in found:
            table = (_Argument * max(1, len(args)))(
                *[_Argument(*a) for a in args])
            for name in names:
                number = lib.seccomp_syscall_resolve_name(name.encode())
                if number < 0:  # not of this ABI, or newer than libseccomp
                    continue
                code = lib.seccomp_rule_add_array(context, action, number,
                                                  len(args), table)
                if code < 0:
                    raise Unavailable(f"seccomp_rule_add({name}) failed: "
                                      f"{os.strerror(-code)}")
        read, write = os.pipe()
        try:
            code = lib.seccomp_export_bpf(context, write)
            os.close(write)
            write = None
            if code < 0:
                raise Unavailable(f"seccomp_export_bpf failed: "
                                  f"{os.strerror(-code)}")
            chunks = []
            while chunk := os.read(read, 2**16):
                chunks.append(chunk)
        finally:
            os.close(read)
            if write is not None:
                os.close(write)
    finally:
        lib.seccomp_release(context)
    prefix = b"".join(bytes(_Filter(*i)) for i in _newer_than(highest,
                                                             machine))
    return prefix + b"".join(chunks)


def program():
    """This machine's program, compiled once per process."""
    if "bpf" not in _PROGRAM:
        _PROGRAM["bpf"] = compile_profile()
    return _PROGRAM["bpf"]


def apply(bpf=None):
    """Load the filter ``bpf`` (:func:`program` by default) into this
    process; ``no_new_privs`` must be set. Raises :class:`Unavailable`
    when the kernel refuses it."""
    bpf = program() if bpf is None else bpf
    size = ctypes.sizeof(_Filter)
    table = (_Filter * (len(bpf) // size)).from_buffer_copy(bpf)
    fprog = _Program(len(table), table)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog),
                  0, 0) != 0:
        number = ctypes.get_errno()
        raise Unavailable(f"seccomp: {os.strerror(number)}")
