/* The Windows test program the Wine tests run under `undertaker.exe run`
 * (scripts/wine/test-windows.py). Every process it starts carries TAG in its command
 * line, so the tests find them from Linux in /proc/PID/cmdline.
 *   treeprog [--tag TAG] [--grandchild] [--sleep S] [--echo] [--exit N]
 *   treeprog --owner UNDERTAKER TAG    start `UNDERTAKER run -- treeprog --tag TAG
 *                                      --grandchild --sleep 600` as our child, sleep
 *   treeprog --owner-pipe UNDERTAKER TAG S  the same with `run --owner-fd H`, H the
 *                                      read end of a pipe we hold the write end of;
 *                                      closes the write end after S seconds, sleeps
 *   treeprog --decoys TAG N PID...     start up to N sleeping `treeprog --tag TAG
 *                                      --sleep 600` children (decoys) until one
 *                                      gets one of the PIDs (reused); keeps those,
 *                                      terminates the others (its own children),
 *                                      prints "decoy PID" per kept one, then sleeps
 * --grandchild starts `treeprog --tag TAG --sleep 600` first (it outlives us).
 * Output: "treeprog: out" on stdout, "treeprog: err" on stderr, then with --echo
 * stdin copied to stdout; exits with N (default 0). */
#include <windows.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char self[MAX_PATH];

static DWORD start(const char *cmdline) {
    STARTUPINFOA si;
    PROCESS_INFORMATION pi;
    char buf[2048];
    memset(&si, 0, sizeof si);
    si.cb = sizeof si;
    snprintf(buf, sizeof buf, "%s", cmdline);
    if (!CreateProcessA(NULL, buf, NULL, NULL, TRUE, 0, NULL, NULL, &si, &pi)) {
        fprintf(stderr, "treeprog: CreateProcess failed: %lu\n", GetLastError());
        exit(90);
    }
    CloseHandle(pi.hThread);
    CloseHandle(pi.hProcess);
    return pi.dwProcessId;
}

int main(int argc, char **argv) {
    const char *tag = "none";
    int grandchild = 0, echo = 0, code = 0;
    long sleep_s = 0;
    char cmd[2048];
    GetModuleFileNameA(NULL, self, sizeof self);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tag") && i + 1 < argc) tag = argv[++i];
        else if (!strcmp(argv[i], "--grandchild")) grandchild = 1;
        else if (!strcmp(argv[i], "--sleep") && i + 1 < argc) sleep_s = atol(argv[++i]);
        else if (!strcmp(argv[i], "--echo")) echo = 1;
        else if (!strcmp(argv[i], "--exit") && i + 1 < argc) code = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--owner") && i + 2 < argc) {
            snprintf(cmd, sizeof cmd, "\"%s\" run -- \"%s\" --tag %s --grandchild --sleep 600",
                     argv[i + 1], self, argv[i + 2]);
            printf("treeprog: undertaker pid %lu\n", start(cmd));
            fflush(stdout);
            Sleep(600 * 1000);
            return 0;
        } else if (!strcmp(argv[i], "--owner-pipe") && i + 3 < argc) {
            SECURITY_ATTRIBUTES sa = {sizeof sa, NULL, TRUE};
            HANDLE rd, wr;
            if (!CreatePipe(&rd, &wr, &sa, 0)) return 91;
            /* Only the read end is inherited: undertaker's end of file is our death. */
            SetHandleInformation(wr, HANDLE_FLAG_INHERIT, 0);
            snprintf(cmd, sizeof cmd,
                     "\"%s\" run --owner-fd %lu -- \"%s\" --tag %s --grandchild --sleep 600",
                     argv[i + 1], (unsigned long)(ULONG_PTR)rd, self, argv[i + 2]);
            printf("treeprog: undertaker pid %lu\n", start(cmd));
            fflush(stdout);
            CloseHandle(rd);
            Sleep((DWORD)atol(argv[i + 3]) * 1000);
            CloseHandle(wr);
            printf("treeprog: pipe closed\n");
            fflush(stdout);
            Sleep(600 * 1000);
            return 0;
        } else if (!strcmp(argv[i], "--decoys") && i + 2 < argc) {
            const char *dtag = argv[i + 1];
            int n = atoi(argv[i + 2]), kept = 0, wanted = argc - (i + 3);
            snprintf(cmd, sizeof cmd, "\"%s\" --tag %s --sleep 600", self, dtag);
            int k;
            for (k = 0; k < n && kept < wanted; k++) {
                STARTUPINFOA si;
                PROCESS_INFORMATION pi;
                char buf[2048];
                int hit = 0;
                memset(&si, 0, sizeof si);
                si.cb = sizeof si;
                snprintf(buf, sizeof buf, "%s", cmd);
                if (!CreateProcessA(NULL, buf, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi)) {
                    printf("decoys: CreateProcess failed: %lu\n", GetLastError());
                    break;
                }
                for (int j = i + 3; j < argc; j++)
                    if ((DWORD)atol(argv[j]) == pi.dwProcessId) hit = 1;
                if (hit) {
                    printf("decoy %lu\n", pi.dwProcessId);
                    fflush(stdout);
                    kept++;
                } else {
                    TerminateProcess(pi.hProcess, 0);
                    WaitForSingleObject(pi.hProcess, INFINITE);
                }
                CloseHandle(pi.hThread);
                CloseHandle(pi.hProcess);
            }
            printf("decoys done after %d spawns\n", k);
            fflush(stdout);
            Sleep(600 * 1000);
            return 0;
        }
    }
    if (grandchild) {
        snprintf(cmd, sizeof cmd, "\"%s\" --tag %s --sleep 600", self, tag);
        DWORD pid = start(cmd);
        fprintf(stderr, "treeprog: grandchild pid %lu\n", pid);
    }
    printf("treeprog: out\n");
    fflush(stdout);
    fprintf(stderr, "treeprog: err\n");
    if (echo) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) fwrite(buf, 1, n, stdout);
        fflush(stdout);
    }
    if (sleep_s > 0) Sleep((DWORD)sleep_s * 1000);
    return code;
}
