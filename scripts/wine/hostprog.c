/* The host the Windows supervise tests drive (scripts/wine/test-windows.py): it starts
 * `UNDERTAKER supervise ARGS...` with pipes for its stdin and stdout, as an MCP host
 * starts its one supervisor, then relays:
 *   our stdin  -> the supervisor's stdin, except `child CMDLINE`, which starts CMDLINE
 *                 as our own child (a new console group) and prints "host: child PID";
 *   the supervisor's stdout -> our stdout.
 *   hostprog [--job nest|breakaway] UNDERTAKER ARGS...
 * --job puts the supervisor in a job of ours first (an IDE's or a terminal's job):
 * `nest` a plain one, `breakaway` one that allows JOB_OBJECT_LIMIT_BREAKAWAY_OK. The
 * host prints "host: supervisor PID" first. Killing the host closes the pipe: end of
 * file for the supervisor, which then tears every tree down. */
#include <windows.h>
#include <stdio.h>
#include <string.h>

static DWORD WINAPI relay_out(LPVOID from) {
    char buf[4096];
    DWORD n;
    HANDLE out = GetStdHandle(STD_OUTPUT_HANDLE);
    while (ReadFile((HANDLE)from, buf, sizeof buf, &n, NULL) && n > 0) {
        DWORD w;
        WriteFile(out, buf, n, &w, NULL);
    }
    printf("host: supervisor output ended\n");
    fflush(stdout);
    return 0;
}

static DWORD start_child(char *cmdline) {
    STARTUPINFOA si;
    PROCESS_INFORMATION pi;
    SECURITY_ATTRIBUTES sa = {sizeof sa, NULL, TRUE};
    HANDLE null = CreateFileA("NUL", GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE,
                              &sa, OPEN_EXISTING, 0, NULL);
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    /* Its stdio is NUL: our stdout carries the supervisor's replies only. */
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = si.hStdOutput = si.hStdError = null;
    BOOL ok = CreateProcessA(NULL, cmdline, NULL, NULL, TRUE, CREATE_NEW_PROCESS_GROUP, NULL, NULL,
                             &si, &pi);
    CloseHandle(null);
    if (!ok) return 0;
    CloseHandle(pi.hThread);
    CloseHandle(pi.hProcess);
    return pi.dwProcessId;
}

int main(int argc, char **argv) {
    const char *job_kind = NULL;
    int i = 1;
    if (argc > 3 && !strcmp(argv[1], "--job")) {
        job_kind = argv[2];
        i = 3;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: hostprog [--job nest|breakaway] UNDERTAKER ARGS...\n");
        return 2;
    }
    char cmd[8192];
    int len = snprintf(cmd, sizeof cmd, "\"%s\"", argv[i]);
    for (int k = i + 1; k < argc; k++) len += snprintf(cmd + len, sizeof cmd - len, " \"%s\"", argv[k]);

    SECURITY_ATTRIBUTES sa = {sizeof sa, NULL, TRUE};
    HANDLE in_rd, in_wr, out_rd, out_wr;
    if (!CreatePipe(&in_rd, &in_wr, &sa, 0) || !CreatePipe(&out_rd, &out_wr, &sa, 0)) return 91;
    SetHandleInformation(in_wr, HANDLE_FLAG_INHERIT, 0);
    SetHandleInformation(out_rd, HANDLE_FLAG_INHERIT, 0);
    STARTUPINFOA si;
    PROCESS_INFORMATION pi;
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    si.dwFlags = STARTF_USESTDHANDLES;
    si.hStdInput = in_rd;
    si.hStdOutput = out_wr;
    si.hStdError = GetStdHandle(STD_ERROR_HANDLE);
    DWORD flags = job_kind ? CREATE_SUSPENDED : 0;
    if (!CreateProcessA(NULL, cmd, NULL, NULL, TRUE, flags, NULL, NULL, &si, &pi)) {
        fprintf(stderr, "host: CreateProcess failed: %lu\n", GetLastError());
        return 92;
    }
    if (job_kind) {
        HANDLE job = CreateJobObjectA(NULL, NULL);
        JOBOBJECT_EXTENDED_LIMIT_INFORMATION info;
        memset(&info, 0, sizeof info);
        if (!strcmp(job_kind, "breakaway"))
            info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_BREAKAWAY_OK;
        SetInformationJobObject(job, JobObjectExtendedLimitInformation, &info, sizeof info);
        if (!AssignProcessToJobObject(job, pi.hProcess)) {
            fprintf(stderr, "host: AssignProcessToJobObject failed: %lu\n", GetLastError());
            return 93;
        }
        ResumeThread(pi.hThread);
    }
    CloseHandle(in_rd);
    CloseHandle(out_wr);
    printf("host: supervisor %lu\n", pi.dwProcessId);
    fflush(stdout);
    CreateThread(NULL, 0, relay_out, out_rd, 0, NULL);
    char line[70000];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "child ", 6)) {
            line[strcspn(line, "\r\n")] = 0;
            printf("host: child %lu\n", start_child(line + 6));
            fflush(stdout);
            continue;
        }
        DWORD w;
        WriteFile(in_wr, line, (DWORD)strlen(line), &w, NULL);
    }
    /* Our input ended: stay, holding the pipe, until killed. */
    Sleep(INFINITE);
    return 0;
}
