//! **The only Windows file with `unsafe`**: every Win32 call undertaker makes, each
//! wrapped in a safe function over owned or borrowed handles (docs/PORTING.md,
//! "Windows"). Handles are `std`'s `OwnedHandle`, closed on drop; none is inheritable,
//! so CMD never holds the job or the owner's pipe.
#![allow(unsafe_code)]

use std::io;
use std::os::windows::io::{AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle};
use std::time::Duration;
use windows_sys::Win32::Foundation::{
    GetLastError, SetHandleInformation, ERROR_ALREADY_EXISTS, ERROR_LOCK_VIOLATION, FILETIME,
    HANDLE, HANDLE_FLAG_INHERIT, INVALID_HANDLE_VALUE, WAIT_FAILED, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::Storage::FileSystem::{
    GetFileType, LockFileEx, FILE_TYPE_PIPE, LOCKFILE_EXCLUSIVE_LOCK, LOCKFILE_FAIL_IMMEDIATELY,
};
use windows_sys::Win32::System::Console::{
    GenerateConsoleCtrlEvent, SetConsoleCtrlHandler, CTRL_BREAK_EVENT, CTRL_CLOSE_EVENT,
    CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT,
};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Process32FirstW, Process32NextW, Thread32First, Thread32Next,
    PROCESSENTRY32W, TH32CS_SNAPPROCESS, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, IsProcessInJob,
    JobObjectBasicAccountingInformation, JobObjectBasicProcessIdList,
    JobObjectExtendedLimitInformation, OpenJobObjectW, QueryInformationJobObject,
    SetInformationJobObject, TerminateJobObject, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Threading::{
    CreateEventW, GetCurrentProcess, GetCurrentProcessId, GetExitCodeProcess, GetProcessTimes,
    OpenEventW, OpenProcess, OpenThread, ResumeThread, SetEvent, TerminateProcess,
    WaitForMultipleObjects, EVENT_MODIFY_STATE, INFINITE, PROCESS_ACCESS_RIGHTS,
    PROCESS_QUERY_INFORMATION, PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SET_QUOTA,
    PROCESS_SYNCHRONIZE, PROCESS_TERMINATE, THREAD_SUSPEND_RESUME,
};

/// What a process handle may be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Wait for it and read its creation time.
    Watch,
    /// Also terminate it.
    Terminate,
    /// Also assign it to a job (`supervise`'s `register` and `adopt`).
    Assign,
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

fn owned(raw: HANDLE) -> io::Result<OwnedHandle> {
    if raw.is_null() || raw == INVALID_HANDLE_VALUE {
        return Err(last_error());
    }
    // SAFETY: a fresh handle the call just returned, owned by nobody else.
    Ok(unsafe { OwnedHandle::from_raw_handle(raw as _) })
}

fn raw(h: BorrowedHandle<'_>) -> HANDLE {
    h.as_raw_handle() as HANDLE
}

fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

/// Creates the job `name` with kill-on-close: when its last handle closes (every
/// undertaker process holding it died, however), the kernel terminates its members.
/// A name that already exists is refused: it would be someone else's job.
pub fn create_kill_on_close_job(name: &str) -> io::Result<OwnedHandle> {
    let name = wide(name);
    // SAFETY: a valid NUL-terminated name; default (non-inheritable) security.
    let raw_job = unsafe { CreateJobObjectW(std::ptr::null(), name.as_ptr()) };
    // SAFETY: reads the calling thread's last error, set by the call above.
    let existed = unsafe { GetLastError() } == ERROR_ALREADY_EXISTS;
    let job = owned(raw_job)?;
    if existed {
        return Err(io::Error::other("a job of that name already exists"));
    }
    // SAFETY: a zeroed plain-data struct is a valid value of it.
    let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    // SAFETY: the struct and its exact size for this information class.
    let ok = unsafe {
        SetInformationJobObject(
            raw(job_borrow(&job)),
            JobObjectExtendedLimitInformation,
            &info as *const _ as *const _,
            std::mem::size_of_val(&info) as u32,
        )
    };
    if ok == 0 {
        return Err(last_error());
    }
    Ok(job)
}

fn job_borrow(h: &OwnedHandle) -> BorrowedHandle<'_> {
    use std::os::windows::io::AsHandle;
    h.as_handle()
}

/// JOB_OBJECT_QUERY (SystemServices in windows-sys, a feature for one constant).
const JOB_OBJECT_QUERY: u32 = 4;

/// Opens the job `name` for reading its member count (`ps`); `None` when it is gone.
pub fn open_job_for_query(name: &str) -> Option<OwnedHandle> {
    let name = wide(name);
    // SAFETY: a valid NUL-terminated name.
    owned(unsafe { OpenJobObjectW(JOB_OBJECT_QUERY, 0, name.as_ptr()) }).ok()
}

pub fn assign_to_job(job: BorrowedHandle<'_>, process: BorrowedHandle<'_>) -> io::Result<()> {
    // SAFETY: two live handles.
    if unsafe { AssignProcessToJobObject(raw(job), raw(process)) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// Whether `process` is a member of `job`, asked through the process's handle.
pub fn is_in_job(process: BorrowedHandle<'_>, job: BorrowedHandle<'_>) -> io::Result<bool> {
    let mut result = 0;
    // SAFETY: two live handles and an out pointer to a BOOL.
    if unsafe { IsProcessInJob(raw(process), raw(job), &mut result) } == 0 {
        return Err(last_error());
    }
    Ok(result != 0)
}

/// Whether `process` is in any job at all (the host's, say): assigning it to ours
/// then nests (Windows 8+) or fails (earlier Windows, and Wine).
pub fn is_in_some_job(process: BorrowedHandle<'_>) -> io::Result<bool> {
    let mut result = 0;
    // SAFETY: a live handle, a null job (any job) and an out pointer to a BOOL.
    if unsafe { IsProcessInJob(raw(process), std::ptr::null_mut(), &mut result) } == 0 {
        return Err(last_error());
    }
    Ok(result != 0)
}

/// Sets or clears the job's kill-on-close. Cleared before the last handle is
/// dropped, the job's members outlive it (`supervise`'s `release`).
pub fn set_kill_on_close(job: BorrowedHandle<'_>, on: bool) -> io::Result<()> {
    // SAFETY: a zeroed plain-data struct is a valid value of it.
    let mut info: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    if on {
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    }
    // SAFETY: the struct and its exact size for this information class.
    let ok = unsafe {
        SetInformationJobObject(
            raw(job),
            JobObjectExtendedLimitInformation,
            &info as *const _ as *const _,
            std::mem::size_of_val(&info) as u32,
        )
    };
    if ok == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// How many processes in the job are still running.
pub fn job_active_processes(job: BorrowedHandle<'_>) -> io::Result<u32> {
    // SAFETY: a zeroed plain-data struct is a valid value of it.
    let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
    // SAFETY: the struct and its exact size for this information class.
    let ok = unsafe {
        QueryInformationJobObject(
            raw(job),
            JobObjectBasicAccountingInformation,
            &mut info as *mut _ as *mut _,
            std::mem::size_of_val(&info) as u32,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(last_error());
    }
    Ok(info.ActiveProcesses)
}

/// The pids the job lists as members (at most 1 024: enough to decide "empty").
pub fn job_member_pids(job: BorrowedHandle<'_>) -> io::Result<Vec<u32>> {
    const MAX: usize = 1024;
    // Header (two u32) then the list of ULONG_PTR ids.
    let mut buf = vec![0usize; 1 + MAX];
    // SAFETY: a buffer of the size passed, aligned for ULONG_PTR.
    let ok = unsafe {
        QueryInformationJobObject(
            raw(job),
            JobObjectBasicProcessIdList,
            buf.as_mut_ptr() as *mut _,
            (buf.len() * std::mem::size_of::<usize>()) as u32,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(last_error());
    }
    let listed = (buf[0] >> 32) as usize;
    Ok(buf[1..=listed.min(MAX)].iter().map(|&p| p as u32).collect())
}

/// Terminates every member of the job with `code`.
pub fn terminate_job(job: BorrowedHandle<'_>, code: u32) -> io::Result<()> {
    // SAFETY: a live job handle.
    if unsafe { TerminateJobObject(raw(job), code) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// Resumes every thread of process `pid` (a child created suspended: its one thread).
/// The caller holds the process's handle, so `pid` cannot name another process.
pub fn resume_threads_of(pid: u32) -> io::Result<usize> {
    // SAFETY: plain call; the snapshot handle is owned below.
    let snap = owned(unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0) })?;
    // SAFETY: a zeroed plain-data struct is a valid value of it.
    let mut entry: THREADENTRY32 = unsafe { std::mem::zeroed() };
    entry.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
    let mut resumed = 0;
    // SAFETY: a live snapshot and an entry whose dwSize is set.
    let mut more = unsafe { Thread32First(raw(job_borrow(&snap)), &mut entry) } != 0;
    while more {
        if entry.th32OwnerProcessID == pid {
            // SAFETY: plain call; the thread handle is owned and closed below.
            let thread =
                owned(unsafe { OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID) })?;
            // SAFETY: a live thread handle with THREAD_SUSPEND_RESUME.
            if unsafe { ResumeThread(raw(job_borrow(&thread))) } == u32::MAX {
                return Err(last_error());
            }
            resumed += 1;
        }
        // SAFETY: as above.
        more = unsafe { Thread32Next(raw(job_borrow(&snap)), &mut entry) } != 0;
    }
    Ok(resumed)
}

/// The parent pid Windows recorded for us (0 when none: started from outside
/// Windows, as under Wine from a Linux shell). A number only: the caller proves it.
pub fn parent_pid() -> io::Result<u32> {
    let me = current_pid();
    Ok(processes()?
        .into_iter()
        .find(|&(pid, _)| pid == me)
        .map_or(0, |(_, parent)| parent))
}

/// Every process as a Toolhelp snapshot lists it: (pid, parent pid). The parent pid
/// is a number Windows never updates: it may name a dead parent or a later process
/// that took its number, so callers compare creation times.
pub fn processes() -> io::Result<Vec<(u32, u32)>> {
    // SAFETY: plain call; the snapshot handle is owned below.
    let snap = owned(unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0) })?;
    // SAFETY: a zeroed plain-data struct is a valid value of it.
    let mut entry: PROCESSENTRY32W = unsafe { std::mem::zeroed() };
    entry.dwSize = std::mem::size_of::<PROCESSENTRY32W>() as u32;
    let mut all = Vec::new();
    // SAFETY: a live snapshot and an entry whose dwSize is set.
    let mut more = unsafe { Process32FirstW(raw(job_borrow(&snap)), &mut entry) } != 0;
    while more {
        all.push((entry.th32ProcessID, entry.th32ParentProcessID));
        // SAFETY: as above.
        more = unsafe { Process32NextW(raw(job_borrow(&snap)), &mut entry) } != 0;
    }
    Ok(all)
}

pub fn current_pid() -> u32 {
    // SAFETY: plain call.
    unsafe { GetCurrentProcessId() }
}

/// Opens process `pid`. The handle pins the process object: the number cannot be
/// reused while it is open, so whatever is proven through it stays true.
pub fn open_process(pid: u32, access: Access) -> io::Result<OwnedHandle> {
    let mut rights: PROCESS_ACCESS_RIGHTS = PROCESS_SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION;
    match access {
        Access::Watch => {}
        Access::Terminate => rights |= PROCESS_TERMINATE,
        // IsProcessInJob through the handle: Wine wants the full query right where
        // Windows takes the limited one (scripts/wine/test-windows.py, WINE notes).
        Access::Assign => {
            rights |= PROCESS_TERMINATE | PROCESS_SET_QUOTA | PROCESS_QUERY_INFORMATION
        }
    }
    // SAFETY: plain call.
    owned(unsafe { OpenProcess(rights, 0, pid) })
}

fn filetime(ft: FILETIME) -> u64 {
    (u64::from(ft.dwHighDateTime) << 32) | u64::from(ft.dwLowDateTime)
}

/// A process's creation time (100 ns since 1601, wall clock): with the pid, an
/// identity no later process can share.
pub fn creation_time(process: BorrowedHandle<'_>) -> io::Result<u64> {
    let zero = FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut c, mut e, mut k, mut u) = (zero, zero, zero, zero);
    // SAFETY: a live handle and four out pointers.
    if unsafe { GetProcessTimes(raw(process), &mut c, &mut e, &mut k, &mut u) } == 0 {
        return Err(last_error());
    }
    Ok(filetime(c))
}

pub fn own_creation_time() -> io::Result<u64> {
    creation_time(current_process())
}

/// The pseudo-handle of the current process.
pub fn current_process() -> BorrowedHandle<'static> {
    // SAFETY: the pseudo-handle of the current process is always valid and needs no
    // closing.
    unsafe { BorrowedHandle::borrow_raw(GetCurrentProcess() as _) }
}

/// The exit code of a process that has exited (`None` while it runs).
pub fn exit_code(process: BorrowedHandle<'_>) -> Option<u32> {
    if wait_any(&[process], Some(Duration::ZERO)).ok()? != Some(0) {
        return None;
    }
    let mut code = 0u32;
    // SAFETY: a live handle and an out pointer.
    (unsafe { GetExitCodeProcess(raw(process), &mut code) } != 0).then_some(code)
}

pub fn terminate_process(process: BorrowedHandle<'_>, code: u32) -> io::Result<()> {
    // SAFETY: a live handle (opened with PROCESS_TERMINATE by the caller).
    if unsafe { TerminateProcess(raw(process), code) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// Waits until one of `handles` is signalled (its index) or `timeout` passes
/// (`None`). `timeout: None` waits without limit.
pub fn wait_any(
    handles: &[BorrowedHandle<'_>],
    timeout: Option<Duration>,
) -> io::Result<Option<usize>> {
    let raws: Vec<HANDLE> = handles.iter().map(|h| raw(*h)).collect();
    let ms = timeout.map_or(INFINITE, |t| {
        u32::try_from(t.as_millis())
            .unwrap_or(INFINITE - 1)
            .min(INFINITE - 1)
    });
    // SAFETY: a list of live handles and its length.
    let got = unsafe { WaitForMultipleObjects(raws.len() as u32, raws.as_ptr(), 0, ms) };
    match got {
        WAIT_TIMEOUT => Ok(None),
        WAIT_FAILED => Err(last_error()),
        n if (n as usize) < raws.len() + WAIT_OBJECT_0 as usize => {
            Ok(Some((n - WAIT_OBJECT_0) as usize))
        }
        // WAIT_ABANDONED_*: only mutexes, which we never wait on.
        n => Err(io::Error::other(format!("unexpected wait result {n}"))),
    }
}

/// A manual-reset event, unnamed (`None`) or named. A name that exists is refused.
pub fn create_event(name: Option<&str>) -> io::Result<OwnedHandle> {
    let name = name.map(wide);
    let ptr = name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr());
    // SAFETY: a NUL-terminated name or null; default (non-inheritable) security.
    let raw_event = unsafe { CreateEventW(std::ptr::null(), 1, 0, ptr) };
    // SAFETY: reads the calling thread's last error, set by the call above.
    let existed = unsafe { GetLastError() } == ERROR_ALREADY_EXISTS;
    let event = owned(raw_event)?;
    if existed {
        return Err(io::Error::other("an event of that name already exists"));
    }
    Ok(event)
}

/// Opens the named event to set it; `None` when nobody created it.
pub fn open_event(name: &str) -> Option<OwnedHandle> {
    let name = wide(name);
    // SAFETY: a valid NUL-terminated name.
    owned(unsafe { OpenEventW(EVENT_MODIFY_STATE, 0, name.as_ptr()) }).ok()
}

pub fn set_event(event: BorrowedHandle<'_>) -> io::Result<()> {
    // SAFETY: a live event handle.
    if unsafe { SetEvent(raw(event)) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// Sends CTRL_BREAK to console process group `group` (CMD started it with
/// CREATE_NEW_PROCESS_GROUP, so the group is CMD's pid, which our handle pins).
pub fn ctrl_break(group: u32) -> io::Result<()> {
    // SAFETY: plain call.
    if unsafe { GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, group) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// The event the console handler sets on close, logoff and shutdown.
static CONSOLE_STOP: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

unsafe extern "system" fn console_handler(kind: u32) -> windows_sys::core::BOOL {
    match kind {
        CTRL_CLOSE_EVENT | CTRL_LOGOFF_EVENT | CTRL_SHUTDOWN_EVENT => {
            let event = CONSOLE_STOP.load(std::sync::atomic::Ordering::SeqCst);
            if event != 0 {
                // SAFETY: the event outlives the handler (it is leaked on install).
                unsafe { SetEvent(event as HANDLE) };
                // Windows ends us when the handler returns: give the teardown time.
                std::thread::sleep(Duration::from_secs(4));
            }
            1
        }
        // Ctrl+C and Ctrl+Break reach CMD from the console itself: the guardian
        // swallows its own copy and stays to tear down once CMD has gone.
        _ => 1,
    }
}

/// Installs the console handler: Ctrl+C/Ctrl+Break are left to CMD, and closing the
/// console (or logoff, shutdown) sets `stop`.
pub fn install_console_handler(stop: OwnedHandle) -> io::Result<()> {
    use std::os::windows::io::IntoRawHandle;
    CONSOLE_STOP.store(
        stop.into_raw_handle() as usize,
        std::sync::atomic::Ordering::SeqCst,
    );
    // SAFETY: a handler with the required signature, valid for the process's life.
    if unsafe { SetConsoleCtrlHandler(Some(console_handler), 1) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// Whether `handle` is a pipe (`--owner-fd` must be one).
pub fn is_pipe(handle: BorrowedHandle<'_>) -> bool {
    // SAFETY: plain call on a handle value; an invalid one yields FILE_TYPE_UNKNOWN.
    unsafe { GetFileType(raw(handle)) == FILE_TYPE_PIPE }
}

/// Borrows an inherited handle given by number (`--owner-fd N`), making it
/// non-inheritable so CMD does not get it too.
pub fn inherited_handle(value: i32) -> io::Result<OwnedHandle> {
    let raw_h = value as isize as HANDLE;
    // SAFETY: plain call on a handle value; fails for a value that is no handle.
    if unsafe { SetHandleInformation(raw_h, HANDLE_FLAG_INHERIT, 0) } == 0 {
        return Err(last_error());
    }
    // SAFETY: the handle was inherited for us to own (the owner keeps its own copy).
    Ok(unsafe { OwnedHandle::from_raw_handle(raw_h as _) })
}

/// Locks one byte far beyond the end of `file`: the liveness lock of a record file
/// (registry/lock.rs). A byte past the data keeps the file readable by others;
/// Windows drops the lock when the process dies. `Ok(false)`: someone holds it.
pub fn lock_file(file: &std::fs::File, blocking: bool) -> io::Result<bool> {
    use windows_sys::Win32::System::IO::OVERLAPPED;
    // SAFETY: a zeroed plain-data struct is a valid value of it.
    let mut at: OVERLAPPED = unsafe { std::mem::zeroed() };
    at.Anonymous.Anonymous.Offset = u32::MAX;
    at.Anonymous.Anonymous.OffsetHigh = 0x7fff_ffff;
    let mut flags = LOCKFILE_EXCLUSIVE_LOCK;
    if !blocking {
        flags |= LOCKFILE_FAIL_IMMEDIATELY;
    }
    // SAFETY: a live file handle and an OVERLAPPED that outlives the (synchronous) call.
    let ok = unsafe { LockFileEx(file.as_raw_handle() as HANDLE, flags, 0, 1, 0, &mut at) };
    if ok != 0 {
        return Ok(true);
    }
    let e = last_error();
    if e.raw_os_error() == Some(ERROR_LOCK_VIOLATION as i32) {
        return Ok(false);
    }
    Err(e)
}

/// Random bytes from the system's generator (tree ids).
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    use windows_sys::Win32::Security::Cryptography::{
        BCryptGenRandom, BCRYPT_USE_SYSTEM_PREFERRED_RNG,
    };
    // SAFETY: a writable buffer of the length passed; no algorithm handle is needed
    // with the system-preferred flag.
    let status = unsafe {
        BCryptGenRandom(
            std::ptr::null_mut(),
            buf.as_mut_ptr(),
            buf.len() as u32,
            BCRYPT_USE_SYSTEM_PREFERRED_RNG,
        )
    };
    if status != 0 {
        return Err(io::Error::other(format!(
            "BCryptGenRandom: status {status:#x}"
        )));
    }
    Ok(())
}
