"""The landlock backend's half inside the sandbox: the supervisor confines itself before its first request, and each
command further, with no privileges and no namespaces.

The landlock backend sends this file's source ahead of the supervisor's (both run in one namespace). `confine_supervisor`
sets no-new-privileges, makes itself the reaper of its commands' orphans, and enters a Landlock domain: read-only
the folders the host lists, read-write the sandbox's work folder and temporary folder, nothing else; no TCP; no
signals and no abstract unix sockets out of the domain (Landlock ABI 6). Each command then enters a nested domain
of the same rules (so it cannot signal or trace its supervisor either) and a seccomp filter that refuses the syscalls
that leave a process group, reach the network, trace, mount, load code into the kernel or touch other processes.

Standard library only, since it runs on the sandbox's Python with no site-packages in sight: the Landlock syscalls
through `ctypes`, the seccomp filter compiled once by the system's libseccomp (`libseccomp.so.2`).
"""

import ctypes
import errno
import os
import stat

SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER = 38, 22, 36
SECCOMP_MODE_FILTER = 2

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
TRUNCATE, IOCTL_DEV = 1 << 14, 1 << 15
#: Rights a rule may give a file that is not a folder.
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ_ONLY = EXECUTE | READ_FILE | READ_DIR
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE | IOCTL_DEV
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2
#: The Landlock ABI this needs: 6 scopes signals and abstract unix sockets to the domain.
MIN_ABI = 6

CLONE_NEW = (0x02000000, 0x10000000, 0x20000000, 0x40000000, 0x08000000, 0x04000000, 0x00020000, 0x00000080)
#: Syscalls no command needs: tracing, mounting, kernel keys and modules, namespaces, leaving the process group,
#: host time and devices.
REFUSED = ("ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot", "bpf",
           "keyctl", "add_key", "request_key", "unshare", "setns", "setsid", "setpgid", "perf_event_open",
           "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "open_by_handle_at",
           "name_to_handle_at", "userfaultfd", "iopl", "ioperm", "swapon", "swapoff", "reboot", "settimeofday",
           "clock_settime", "clock_adjtime", "adjtimex", "acct", "quotactl", "quotactl_fd", "syslog", "fanotify_init",
           "io_uring_setup", "io_uring_enter", "io_uring_register", "mount_setattr", "fsopen", "fsconfig", "fsmount",
           "fspick", "move_mount", "open_tree", "lookup_dcookie", "vhangup", "uselib", "kcmp", "move_pages",
           "migrate_pages", "process_madvise", "personality")
#: Syscalls that act on another process when their first (or, for these two, second) argument is not 0.
OTHERS_AT_ARG0 = ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr")
OTHERS_AT_ARG1 = ("setpriority", "ioprio_set")
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
AF_UNIX = 1

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_NE, SCMP_CMP_EQ, SCMP_CMP_MASKED_EQ = 1, 4, 7


def SCMP_ACT_ERRNO(number):
    return 0x00050000 | (number & 0xFFFF)


class ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


class PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class Unconfinable(Exception):
    """This kernel or system cannot confine a sandbox (no Landlock, too old an ABI, no libseccomp)."""


LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long
#: What each command's child needs: the ruleset to enter again and the compiled filter.
CONFINEMENT = {}


def checked(result, what):
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def landlock_abi():
    """The kernel's Landlock ABI version; 0 when it has none (or has it turned off)."""
    version = LIBC.syscall(ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, version)


def make_ruleset(abi, read, write, devices):
    """A Landlock ruleset fd: `read` read-only, `write` read-write, `devices` readable and writable files."""
    handled = (1 << 13) - 1 | ((1 << 13) if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0) | \
        (IOCTL_DEV if abi >= 5 else 0)
    attr = RulesetAttr(handled, 3 if abi >= 4 else 0, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = checked(LIBC.syscall(ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr),
                                   ctypes.c_size_t(size), ctypes.c_uint32(0)), "landlock_create_ruleset")
    for paths, rights in ((read, READ_ONLY), (write, handled), (devices, DEVICE)):
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue        # a folder this system does not have
            try:
                allowed = rights & handled
                if not stat.S_ISDIR(os.fstat(fd).st_mode):
                    allowed &= FILE_RIGHTS
                rule = PathBeneath(allowed, fd)
                checked(LIBC.syscall(ctypes.c_long(SYS_LANDLOCK_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(1),
                                     ctypes.byref(rule), ctypes.c_uint32(0)), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
    return ruleset


def compile_filter(unix_sockets):
    """The commands' seccomp filter as BPF, compiled by libseccomp for this machine's architecture."""
    try:
        seccomp = ctypes.CDLL("libseccomp.so.2")
    except OSError:
        raise Unconfinable("no libseccomp.so.2 here (apt-get install libseccomp2)") from None
    seccomp.seccomp_init.restype = ctypes.c_void_p
    seccomp.seccomp_init.argtypes = [ctypes.c_uint32]
    seccomp.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.POINTER(ArgCmp)]
    seccomp.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    seccomp.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    seccomp.seccomp_release.argtypes = [ctypes.c_void_p]
    context = seccomp.seccomp_init(SCMP_ACT_ALLOW)

    def refuse(name, *compare, number=errno.EPERM):
        syscall = seccomp.seccomp_syscall_resolve_name(name.encode())
        if syscall < 0:
            return        # not a syscall on this architecture
        array = (ArgCmp * max(1, len(compare)))(*[ArgCmp(*c) for c in compare])
        checked(seccomp.seccomp_rule_add_array(context, SCMP_ACT_ERRNO(number), syscall, len(compare), array),
                f"seccomp rule for {name}")

    for name in REFUSED:
        refuse(name)
    for name in OTHERS_AT_ARG0:
        refuse(name, (0, SCMP_CMP_NE, 0, 0))
    for name in OTHERS_AT_ARG1:
        refuse(name, (1, SCMP_CMP_NE, 0, 0))
    for flag in CLONE_NEW:
        refuse("clone", (0, SCMP_CMP_MASKED_EQ, flag, flag))
    refuse("clone3", number=errno.ENOSYS)      # its flags are out of a filter's reach; the C library falls back
    for request in (TIOCSTI, TIOCLINUX):
        refuse("ioctl", (1, SCMP_CMP_MASKED_EQ, 0xFFFFFFFF, request))
    if unix_sockets:
        refuse("socket", (0, SCMP_CMP_NE, AF_UNIX, 0))
    else:
        refuse("socket")
    refuse("socketpair", (0, SCMP_CMP_NE, AF_UNIX, 0))
    out = os.memfd_create("filter", os.MFD_CLOEXEC)
    try:
        checked(seccomp.seccomp_export_bpf(context, out), "seccomp_export_bpf")
        os.lseek(out, 0, os.SEEK_SET)
        program = b""
        while chunk := os.read(out, 65536):
            program += chunk
    finally:
        os.close(out)
        seccomp.seccomp_release(context)
    return program


def confine_supervisor(spec):
    """Confine this process (the supervisor) as `spec` says and prepare each command's confinement; what it enforces."""
    abi = landlock_abi()
    if abi < MIN_ABI:
        raise Unconfinable(f"Landlock ABI {abi} here; sandboxes without namespaces need {MIN_ABI} (Linux 6.12), "
                           "which keeps signals and abstract sockets inside")
    program = compile_filter(spec["unix_sockets"])
    checked(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    checked(LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "child_subreaper")
    ruleset = make_ruleset(abi, spec["read"], spec["write"], spec["devices"])
    checked(LIBC.syscall(ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self")
    buffer = ctypes.create_string_buffer(program, len(program))
    CONFINEMENT.update(ruleset=ruleset, buffer=buffer, fprog=Fprog(len(program) // 8, ctypes.addressof(buffer)))
    return {"landlock": abi, "seccomp": True}


def confine_command():
    """In a command's child, after its new session and rlimits: a nested Landlock domain, then the filter."""
    checked(LIBC.syscall(ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(CONFINEMENT["ruleset"]),
                         ctypes.c_uint32(0)), "landlock_restrict_self")
    checked(LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(CONFINEMENT["fprog"]), 0, 0), "seccomp")
