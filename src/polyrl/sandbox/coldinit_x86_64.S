# polyrl's init for cold sandbox executions (x86_64 Linux, no libc).
#
# bwrap runs it as pid 1 of the execution's pid namespace (--as-pid-1):
#     init PROG ARGS...
# It forks the program (pid 2) and waits for it, so that:
#   - the program is not pid 1: the signals it sends itself act as anywhere else
#     (the kernel drops those a pid 1 has no handler for), and its orphans are reaped;
#   - its CPU time and peak memory reach bwrap's wait4 (through this process's);
#   - the host's SIGTERM reaches the program, not this init: every signal is blocked
#     here (SIGKILL cannot be: as root, the host's first SIGKILL spares this init).
# When the program ends this init kills and reaps whatever else runs in the namespace
# (so that its usage is counted too; only as pid 1), then exits with the program's
# status: the exit code, or 128 + N for death by signal N (as bwrap reports it). A
# stop of the program (it made this init its tracer) is no end. The program is looked
# up in PATH as Python's os.execvpe does (a warm execution's: an entry whose file cannot
# run is passed over; a name over NAME_MAX is "File name too long"); when it cannot be
# executed the init writes "polyrl sandbox: PROG: REASON" to stderr and exits with 127
# (not found) or 126, as a shell does.
#
# Built into bytes by tests/sandbox/test_coldinit.py (which checks that the bytes in
# polyrl/sandbox/coldinit.py are this file's): as --64 -o x.o FILE &&
# objcopy -O binary -j .text x.o x.bin. Position-independent; data is on the stack.

        .intel_syntax noprefix
        .text
        .globl _start
_start:
        mov     r12, rsp                # [r12] = argc, r12 + 8 = argv
        # hold no descriptor but 0-2 (this program's own memfd among them)
        mov     edi, 3
        mov     esi, -1
        xor     edx, edx
        mov     eax, 436                # close_range(3, ~0, 0)
        syscall
        test    rax, rax
        jz      1f
        mov     ebx, 3                  # kernels < 5.9: close 3..1023 (RLIMIT_NOFILE)
0:      mov     edi, ebx
        mov     eax, 3                  # close
        syscall
        inc     ebx
        cmp     ebx, 1024
        jb      0b
1:      sub     rsp, 4160               # [rsp] mask, [rsp+8] old mask, [rsp+16] status,
                                        # [rsp+24] PATH position, [rsp+32] an error,
                                        # [rsp+64, +4160) a path
        mov     qword ptr [rsp], -1
        xor     edi, edi                # SIG_BLOCK
        mov     rsi, rsp
        lea     rdx, [rsp+8]
        mov     r10d, 8
        mov     eax, 14                 # rt_sigprocmask
        syscall
        mov     eax, 57                 # fork
        syscall
        test    rax, rax
        jz      child
        js      forkfail
        mov     r13, rax                # the program's pid
reap:   mov     edi, -1
        lea     rsi, [rsp+16]
        mov     edx, 0x40000000         # __WALL
        xor     r10d, r10d
        mov     eax, 61                 # wait4(-1, &status, __WALL, NULL)
        syscall
        cmp     rax, r13
        je      ended
        cmp     rax, -4                 # EINTR
        je      reap
        test    rax, rax
        jg      reap                    # an orphan
        mov     edi, 125                # ECHILD: cannot happen
        jmp     leave
ended:  mov     eax, dword ptr [rsp+16]
        cmp     al, 0x7f                # stopped: a tracee of this init (the program
        je      reap                    # called PTRACE_TRACEME), not an end
        mov     edi, eax
        and     edi, 0x7f
        jz      exited
        add     edi, 128                # killed by signal N: 128 + N
        jmp     leave
exited: mov     edi, eax
        shr     edi, 8
        and     edi, 0xff
leave:  mov     ebp, edi                # the status to exit with
        # As pid 1 (never elsewhere: outside a pid namespace kill(-1) reaches every
        # process the caller may signal, the whole host for root), kill what is left
        # (kill(-1) spares this init) and reap it: a process the namespace's end kills
        # is reaped uncounted (its CPU time and memory would never reach wait4)
        mov     eax, 39                 # getpid
        syscall
        cmp     eax, 1
        jne     done
drain:  mov     edi, -1
        mov     esi, 9
        mov     eax, 62                 # kill(-1, SIGKILL)
        syscall
        mov     edi, -1
        xor     esi, esi
        mov     edx, 0x40000000         # __WALL
        xor     r10d, r10d
        mov     eax, 61                 # wait4(-1, NULL, __WALL, NULL)
        syscall
        cmp     rax, -10                # ECHILD: none left
        jne     drain
done:   mov     edi, ebp
        mov     eax, 231                # exit_group
        syscall
forkfail:
        mov     ebp, eax                # -errno
        lea     rbx, [rip+fork_name]
        jmp     report

child:  mov     edi, 2                  # SIG_SETMASK: the mask this init started with
        lea     rsi, [rsp+8]
        xor     edx, edx
        mov     r10d, 8
        mov     eax, 14
        syscall
        lea     r14, [r12+16]           # &argv[1]
        mov     rcx, [r12]
        lea     r15, [r12+rcx*8+16]     # envp
        mov     rbx, [r14]              # the program's name
        mov     ebp, -14                # EFAULT: no program
        test    rbx, rbx
        jnz     1f
        lea     rbx, [rip+fork_name+4]  # an empty name
        jmp     report
1:
        mov     ebp, -2                 # ENOENT
        cmp     byte ptr [rbx], 0
        je      report
        mov     rdi, rbx
scan:   mov     al, [rdi]
        test    al, al
        jz      search
        cmp     al, '/'
        je      direct
        inc     rdi
        jmp     scan
direct: mov     rdi, rbx
        mov     rsi, r14
        mov     rdx, r15
        mov     eax, 59                 # execve
        syscall
        mov     ebp, eax
        jmp     report

search: mov     rax, rdi                # a name longer than NAME_MAX: ENAMETOOLONG,
        sub     rax, rbx                # as execvp (no entry could hold it)
        mov     ebp, -36
        cmp     rax, 255
        ja      report
        mov     r8, r15                 # find PATH= in the environment
envvar: mov     rsi, [r8]
        test    rsi, rsi
        jz      nopath
        cmp     dword ptr [rsi], 0x48544150     # "PATH"
        jne     envnext
        cmp     byte ptr [rsi+4], '='
        jne     envnext
        lea     r9, [rsi+5]
        jmp     entries
envnext:
        add     r8, 8
        jmp     envvar
nopath: lea     r9, [rip+default_path]
entries:
        mov     dword ptr [rsp+32], 0   # the first error but ENOENT/ENOTDIR (-errno)
entry:  lea     rdi, [rsp+64]           # path = entry + "/" + name
        lea     r10, [rsp+4160-1]       # its end, for the NUL
        mov     rsi, r9
copydir:
        mov     al, [rsi]
        test    al, al
        jz      dirend
        cmp     al, ':'
        je      dirend
        cmp     rdi, r10
        jae     skip
        mov     [rdi], al
        inc     rdi
        inc     rsi
        jmp     copydir
dirend: lea     rax, [rsp+64]
        cmp     rdi, rax                # an empty entry: the current directory
        je      copyname
        mov     byte ptr [rdi], '/'
        inc     rdi
copyname:
        mov     rdx, rbx
namebyte:
        cmp     rdi, r10
        jae     skip
        mov     al, [rdx]
        mov     [rdi], al
        inc     rdi
        inc     rdx
        test    al, al
        jnz     namebyte
        mov     [rsp+24], rsi           # where this entry ended
        lea     rdi, [rsp+64]
        mov     rsi, r14
        mov     rdx, r15
        mov     eax, 59                 # execve
        syscall
        mov     rsi, [rsp+24]
        cmp     eax, -2                 # as Python's os.execvpe (a warm execution's):
        je      next                    # every error tries the next entry; the first
        cmp     eax, -20                # one but ENOENT/ENOTDIR is reported at the end
        je      next
        cmp     dword ptr [rsp+32], 0
        jne     next
        mov     dword ptr [rsp+32], eax
        jmp     next
skip:   cmp     dword ptr [rsp+32], 0   # too long a path: ENAMETOOLONG, as execve
        jne     skipto                  # says (and os.execvpe reports at the end)
        mov     dword ptr [rsp+32], -36
skipto: mov     al, [rsi]               # the next entry
        test    al, al
        jz      next
        cmp     al, ':'
        je      next
        inc     rsi
        jmp     skipto
next:   cmp     byte ptr [rsi], 0
        je      notfound
        lea     r9, [rsi+1]
        jmp     entry
notfound:
        mov     ebp, dword ptr [rsp+32]
        test    ebp, ebp
        jnz     report
        mov     ebp, -2

report: # "polyrl sandbox: NAME: REASON\n" on stderr; exit 127 (ENOENT) or 126
        lea     rsi, [rip+prefix]
        mov     edx, 16
        call    put
        mov     rsi, rbx
        xor     edx, edx
namelen:
        cmp     byte ptr [rsi+rdx], 0
        je      1f
        inc     edx
        jmp     namelen
1:      call    put
        lea     rsi, [rip+colon]
        mov     edx, 2
        call    put
        neg     ebp                     # errno
        lea     rsi, [rip+reasons]
find:   movzx   eax, byte ptr [rsi]
        movzx   edx, byte ptr [rsi+1]
        add     rsi, 2
        test    eax, eax
        jz      found                   # the table's end: the default reason
        cmp     eax, ebp
        je      found
        add     rsi, rdx
        jmp     find
found:  call    put
        lea     rsi, [rip+newline]
        mov     edx, 1
        call    put
        mov     edi, 126
        cmp     ebp, 2
        jne     2f
        mov     edi, 127
2:      mov     eax, 231                # exit_group
        syscall

put:    mov     edi, 2                  # write(2, rsi, rdx)
        mov     eax, 1
        syscall
        ret

prefix: .ascii  "polyrl sandbox: "
colon:  .ascii  ": "
newline:
        .ascii  "\n"
fork_name:
        .asciz  "fork"
default_path:
        .asciz  "/bin:/usr/bin"
reasons:
        .byte   2, 25
        .ascii  "No such file or directory"
        .byte   13, 17
        .ascii  "Permission denied"
        .byte   8, 17
        .ascii  "Exec format error"
        .byte   7, 22
        .ascii  "Argument list too long"
        .byte   20, 15
        .ascii  "Not a directory"
        .byte   21, 14
        .ascii  "Is a directory"
        .byte   40, 33
        .ascii  "Too many levels of symbolic links"
        .byte   36, 18
        .ascii  "File name too long"
        .byte   26, 14
        .ascii  "Text file busy"
        .byte   12, 22
        .ascii  "Cannot allocate memory"
        .byte   11, 32
        .ascii  "Resource temporarily unavailable"
        .byte   0, 14
        .ascii  "cannot execute"
