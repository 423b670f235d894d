//! Byte fixtures for the parsers: laid out as xnu's headers declare the structs (a
//! `#[repr(C)]` mirror checks the offsets), and `KERN_PROCARGS2` buffers shaped as
//! xnu's `sysctl_procargsx` writes them.

use super::*;
use std::mem::{offset_of, size_of};

/// `struct proc_bsdinfo` as `bsd/sys/proc_info.h` declares it.
#[repr(C)]
struct ProcBsdInfo {
    pbi_flags: u32,
    pbi_status: u32,
    pbi_xstatus: u32,
    pbi_pid: u32,
    pbi_ppid: u32,
    pbi_uid: u32,
    pbi_gid: u32,
    pbi_ruid: u32,
    pbi_rgid: u32,
    pbi_svuid: u32,
    pbi_svgid: u32,
    rfu_1: u32,
    pbi_comm: [u8; 16],
    pbi_name: [u8; 32],
    pbi_nfiles: u32,
    pbi_pgid: u32,
    pbi_pjobc: u32,
    e_tdev: u32,
    e_tpgid: u32,
    pbi_nice: i32,
    pbi_start_tvsec: u64,
    pbi_start_tvusec: u64,
}

/// `struct proc_uniqidentifierinfo` as `bsd/sys/proc_info_private.h` declares it.
#[repr(C)]
struct ProcUniqIdentifierInfo {
    p_uuid: [u8; 16],
    p_uniqueid: u64,
    p_puniqueid: u64,
    p_idversion: i32,
    p_orig_ppidversion: u32,
    p_reserve2: u64,
    p_reserve3: u64,
}

#[repr(C)]
struct ProcBsdInfoWithUniqId {
    pbsd: ProcBsdInfo,
    p_uniqidentifier: ProcUniqIdentifierInfo,
}

#[test]
fn struct_sizes_and_offsets_are_xnus() {
    assert_eq!(size_of::<ProcBsdInfo>(), BSDINFO_SIZE);
    assert_eq!(size_of::<ProcUniqIdentifierInfo>(), UNIQID_SIZE);
    assert_eq!(size_of::<ProcBsdInfoWithUniqId>(), BSDINFO_WITH_UNIQID_SIZE);
    assert_eq!(BSDINFO_WITH_UNIQID_SIZE, 192);
    assert_eq!(
        offset_of!(ProcBsdInfoWithUniqId, p_uniqidentifier),
        BSDINFO_SIZE
    );
    assert_eq!(offset_of!(ProcBsdInfo, pbi_status), bsdinfo::STATUS);
    assert_eq!(offset_of!(ProcBsdInfo, pbi_pid), bsdinfo::PID);
    assert_eq!(offset_of!(ProcBsdInfo, pbi_ppid), bsdinfo::PPID);
    assert_eq!(offset_of!(ProcBsdInfo, pbi_uid), bsdinfo::UID);
    assert_eq!(offset_of!(ProcBsdInfo, pbi_pgid), bsdinfo::PGID);
    assert_eq!(
        offset_of!(ProcBsdInfo, pbi_start_tvsec),
        bsdinfo::START_TVSEC
    );
    assert_eq!(
        offset_of!(ProcBsdInfo, pbi_start_tvusec),
        bsdinfo::START_TVUSEC
    );
    assert_eq!(
        offset_of!(ProcUniqIdentifierInfo, p_uniqueid),
        uniqid::UNIQUEID
    );
    assert_eq!(
        offset_of!(ProcUniqIdentifierInfo, p_puniqueid),
        uniqid::PUNIQUEID
    );
    assert_eq!(
        offset_of!(ProcUniqIdentifierInfo, p_idversion),
        uniqid::IDVERSION
    );
    assert_eq!(
        offset_of!(ProcUniqIdentifierInfo, p_orig_ppidversion),
        uniqid::ORIG_PPIDVERSION
    );
}

/// A flavor-18 answer with every field this parser reads set, and the others filled
/// with a pattern that would show if an offset were off.
fn flavor18(status: u32) -> Vec<u8> {
    let mut b = vec![0xa5u8; BSDINFO_WITH_UNIQID_SIZE];
    let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
    put(bsdinfo::STATUS, &status.to_ne_bytes());
    put(bsdinfo::PID, &4242u32.to_ne_bytes());
    put(bsdinfo::PPID, &4241u32.to_ne_bytes());
    put(bsdinfo::UID, &501u32.to_ne_bytes());
    put(bsdinfo::PGID, &4240u32.to_ne_bytes());
    put(bsdinfo::START_TVSEC, &1_700_000_000u64.to_ne_bytes());
    put(bsdinfo::START_TVUSEC, &123_456u64.to_ne_bytes());
    let u = BSDINFO_SIZE;
    put(u + uniqid::UNIQUEID, &90_001u64.to_ne_bytes());
    put(u + uniqid::PUNIQUEID, &90_000u64.to_ne_bytes());
    put(u + uniqid::IDVERSION, &777u32.to_ne_bytes());
    put(u + uniqid::ORIG_PPIDVERSION, &776u32.to_ne_bytes());
    b
}

#[test]
fn a_flavor18_answer_parses_field_by_field() {
    let info = bsdinfo_with_uniqid(&flavor18(3)).expect("right size");
    assert_eq!(
        info,
        BsdInfo {
            pid: 4242,
            ppid: 4241,
            pgid: 4240,
            uid: 501,
            status: 3,
            start_us: 1_700_000_000_123_456,
            uniqueid: 90_001,
            puniqueid: 90_000,
            version: 777,
            orig_ppidversion: 776,
        }
    );
    assert!(!info.is_zombie() && !info.is_stopped());
    assert!(bsdinfo_with_uniqid(&flavor18(5)).unwrap().is_zombie());
    assert!(bsdinfo_with_uniqid(&flavor18(4)).unwrap().is_stopped());
}

#[test]
fn an_answer_of_another_size_is_refused() {
    let b = flavor18(3);
    assert_eq!(bsdinfo_with_uniqid(&b[..BSDINFO_SIZE]), None);
    assert_eq!(bsdinfo_with_uniqid(&b[..b.len() - 1]), None);
    let mut longer = b.clone();
    longer.push(0);
    assert_eq!(bsdinfo_with_uniqid(&longer), None);
}

#[test]
fn the_audit_token_holds_pid_at_byte_20_and_version_at_byte_28() {
    let token = audit_token(4242, 777);
    let bytes: Vec<u8> = token.iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(bytes.len(), 32);
    assert_eq!(&bytes[20..24], &4242u32.to_ne_bytes());
    assert_eq!(&bytes[28..32], &777u32.to_ne_bytes());
    assert!(bytes[..20].iter().chain(&bytes[24..28]).all(|&c| c == 0));
}

/// A buffer as xnu writes it: argc, exec path, NUL padding, argv, env, the empty
/// terminator, the apple strings.
fn procargs(argc: i32, exec: &str, argv: &[&str], env: &[&str], apple: &[&str]) -> Vec<u8> {
    let mut b = argc.to_ne_bytes().to_vec();
    b.extend_from_slice(exec.as_bytes());
    b.extend_from_slice(&[0; 7]);
    for s in argv.iter().chain(env) {
        b.extend_from_slice(s.as_bytes());
        b.push(0);
    }
    b.push(0);
    for s in apple {
        b.extend_from_slice(s.as_bytes());
        b.push(0);
    }
    b
}

const TREE: &str = "UNDERTAKER_TREE=4f1c2a9e0b7d4c3a";

#[test]
fn procargs2_gives_argc_exec_path_argv_and_env() {
    let b = procargs(
        3,
        "/bin/sleep",
        &["sleep", "--", "60"],
        &["PATH=/usr/bin:/bin", TREE, "HOME=/Users/me"],
        &["executable_path=/bin/sleep", "ptr_munge="],
    );
    let args = procargs2(&b).expect("well formed");
    assert_eq!(args.exec_path, b"/bin/sleep");
    assert_eq!(args.argv, [&b"sleep"[..], b"--", b"60"]);
    assert_eq!(args.env.len(), 3);
    assert_eq!(
        args.env_value("UNDERTAKER_TREE"),
        Some(&b"4f1c2a9e0b7d4c3a"[..])
    );
    assert_eq!(args.env_value("HOME"), Some(&b"/Users/me"[..]));
    assert_eq!(args.env_value("UNDERTAKER"), None);
}

#[test]
fn the_marker_counts_only_in_the_environment() {
    // In argv, or among the apple strings after the terminator: not the environment.
    let b = procargs(2, "/bin/echo", &["echo", TREE], &["PATH=/bin"], &[TREE]);
    let args = procargs2(&b).unwrap();
    assert_eq!(args.env, [&b"PATH=/bin"[..]]);
    assert_eq!(args.env_value("UNDERTAKER_TREE"), None);
}

#[test]
fn the_first_of_two_markers_wins_as_getenv_finds_it() {
    let b = procargs(1, "/bin/sh", &["sh"], &[TREE, "UNDERTAKER_TREE=other"], &[]);
    let args = procargs2(&b).unwrap();
    assert_eq!(
        args.env_value("UNDERTAKER_TREE"),
        Some(&b"4f1c2a9e0b7d4c3a"[..])
    );
}

#[test]
fn a_truncated_buffer_never_yields_a_cut_marker() {
    let b = procargs(1, "/bin/sh", &["sh"], &["A=1", TREE], &[]);
    // Cut inside the marker's value: the unterminated string is dropped, not read as
    // a shorter value.
    let marker_at = b
        .windows(TREE.len())
        .position(|w| w == TREE.as_bytes())
        .unwrap();
    let cut = &b[..marker_at + TREE.len() - 3];
    let args = procargs2(cut).expect("argv is whole");
    assert_eq!(args.env, [&b"A=1"[..]]);
    assert_eq!(args.env_value("UNDERTAKER_TREE"), None);
}

#[test]
fn malformed_buffers_are_refused() {
    assert_eq!(procargs2(&[]), None);
    assert_eq!(procargs2(&[1, 0]), None);
    // A negative argc.
    assert_eq!(procargs2(&procargs(-1, "/bin/sh", &["sh"], &[], &[])), None);
    // More arguments promised than the buffer holds.
    let b = procargs(5, "/bin/sh", &["sh"], &[], &[]);
    assert_eq!(procargs2(&b[..b.len() - 1]), None);
    // An exec path without its NUL.
    let mut b = 1i32.to_ne_bytes().to_vec();
    b.extend_from_slice(b"/bin/sh");
    assert_eq!(procargs2(&b), None);
}

#[test]
fn no_environment_at_all_is_an_empty_one() {
    let b = procargs(1, "/bin/true", &["true"], &[], &[]);
    let args = procargs2(&b).unwrap();
    assert!(args.env.is_empty());
    assert_eq!(args.argv, [&b"true"[..]]);
}

#[test]
fn facts_carry_the_identity_and_leave_out_zombies_and_reserved_zeros() {
    let info = bsdinfo_with_uniqid(&flavor18(3)).unwrap();
    let facts = info.facts().expect("alive");
    assert_eq!(
        (
            facts.serial,
            facts.parent_serial,
            facts.version,
            facts.orig_parent_version
        ),
        (90_001, Some(90_000), Some(777), Some(776))
    );
    assert_eq!(
        (facts.pid, facts.ppid, facts.pgid, facts.uid),
        (4242, 4241, 4240, 501)
    );
    assert!(!facts.stopped);
    assert!(
        bsdinfo_with_uniqid(&flavor18(4))
            .unwrap()
            .facts()
            .unwrap()
            .stopped
    );
    assert_eq!(bsdinfo_with_uniqid(&flavor18(5)).unwrap().facts(), None);
    // Before macOS 15.4 the field is a reserved zero: no version link.
    let mut b = flavor18(3);
    let at = BSDINFO_SIZE + uniqid::ORIG_PPIDVERSION;
    b[at..at + 4].copy_from_slice(&0u32.to_ne_bytes());
    assert_eq!(
        bsdinfo_with_uniqid(&b)
            .unwrap()
            .facts()
            .unwrap()
            .orig_parent_version,
        None
    );
}
