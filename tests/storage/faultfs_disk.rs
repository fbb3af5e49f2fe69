//! The fault filesystem's disk (`tenure_harness::faultfs::disk`), without FUSE, so any
//! user runs it: what reads see, what a sync keeps, what a power loss leaves.

use std::ffi::OsStr;
use std::fs;

use tenure_harness::faultfs::disk::{DirSync, Disk, Loss, ROOT, TRASH};

fn disk(dir_sync: DirSync) -> (tempfile::TempDir, Disk) {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let disk = Disk::new(dir.path(), dir_sync).expect("a disk");
    (dir, disk)
}

fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// What a program reading the whole of `file` sees.
fn read_all(disk: &mut Disk, file: &str) -> Vec<u8> {
    let ino = disk.lookup(ROOT, name(file)).expect("the file").ino;
    let fh = disk.open(ino).expect("open");
    let data = disk.read(fh, 0, 1 << 20).expect("read");
    disk.release(fh);
    data
}

#[test]
fn reads_see_buffered_writes_and_only_a_sync_reaches_the_backing_file() {
    let (dir, mut d) = disk(DirSync::Immediate);
    let (attr, fh) = d.create(ROOT, name("log"), 0o644).expect("create");
    d.write(fh, 0, b"hello ").expect("write");
    d.write(fh, 6, b"world").expect("write");
    d.write(fh, 0, b"J").expect("write");
    assert_eq!(d.read(fh, 0, 100).expect("read"), b"Jello world");
    assert_eq!(d.read(fh, 6, 3).expect("read"), b"wor");
    assert_eq!(d.getattr(attr.ino, Some(fh)).expect("attr").size, 11);
    assert_eq!(fs::read(dir.path().join("log")).expect("backing"), b"");
    assert_eq!(d.unsynced_bytes(), 12);

    d.fsync(attr.ino, Some(fh)).expect("fsync");
    assert_eq!(
        fs::read(dir.path().join("log")).expect("backing"),
        b"Jello world"
    );
    assert_eq!(d.unsynced_bytes(), 0);
}

#[test]
fn a_truncation_is_buffered_and_zeroes_what_a_later_write_past_it_leaves() {
    let (dir, mut d) = disk(DirSync::Immediate);
    let (attr, fh) = d.create(ROOT, name("f"), 0o644).expect("create");
    d.write(fh, 0, b"abcdef").expect("write");
    d.fsync(attr.ino, Some(fh)).expect("fsync");
    d.setattr(attr.ino, Some(fh), Some(2), None)
        .expect("truncate");
    d.write(fh, 4, b"Z").expect("write");
    assert_eq!(d.read(fh, 0, 100).expect("read"), b"ab\0\0Z");
    assert_eq!(fs::read(dir.path().join("f")).expect("backing"), b"abcdef");
    d.power_loss(Loss::Drop);
    assert_eq!(
        read_all(&mut d, "f"),
        b"abcdef",
        "the truncation was never synced"
    );
}

#[test]
fn a_power_loss_drops_what_was_not_synced_and_keeps_what_was() {
    let (_dir, mut d) = disk(DirSync::Immediate);
    let (attr, fh) = d.create(ROOT, name("wal"), 0o644).expect("create");
    d.write(fh, 0, b"synced;").expect("write");
    d.fsync(attr.ino, Some(fh)).expect("fsync");
    d.write(fh, 7, b"lost").expect("write");
    let report = d.power_loss(Loss::Drop);
    assert_eq!(
        (report.files, report.bytes_dropped, report.bytes_kept),
        (1, 4, 0)
    );
    assert_eq!(read_all(&mut d, "wal"), b"synced;");
}

#[test]
fn a_torn_loss_keeps_a_prefix_of_the_writes_in_order() {
    // Writes at separate offsets, so each is its own change: a torn loss keeps the
    // first k of them, the next one cut short.
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..64 {
        let (_dir, mut d) = disk(DirSync::Immediate);
        let (_, fh) = d.create(ROOT, name("f"), 0o644).expect("create");
        for (i, chunk) in [b"aaaa", b"bbbb", b"cccc"].iter().enumerate() {
            d.write(fh, 10 * i as u64, *chunk).expect("write");
        }
        let report = d.power_loss(Loss::Torn(seed));
        assert_eq!(report.bytes_kept + report.bytes_dropped, 12);
        let data = read_all(&mut d, "f");
        let expect: Vec<u8> = {
            let mut full = vec![0u8; 24];
            full[0..4].copy_from_slice(b"aaaa");
            full[10..14].copy_from_slice(b"bbbb");
            full[20..24].copy_from_slice(b"cccc");
            full
        };
        // Whatever survives is the full history cut at one point.
        assert!(
            expect.starts_with(&data) || data.iter().all(|b| *b == 0),
            "seed {seed}: {data:?}"
        );
        assert_eq!(
            data.iter().filter(|b| **b != 0).count() as u64,
            report.bytes_kept,
            "seed {seed}"
        );
        seen.insert(report.bytes_kept);
    }
    assert!(
        seen.len() > 4,
        "torn losses keep different amounts: {seen:?}"
    );
}

#[test]
fn a_failed_sync_leaves_the_writes_buffered() {
    let (dir, mut d) = disk(DirSync::Immediate);
    let (attr, fh) = d.create(ROOT, name("f"), 0o644).expect("create");
    d.write(fh, 0, b"x").expect("write");
    d.fail_syncs(1);
    let err = d.fsync(attr.ino, Some(fh)).expect_err("the sync fails");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert_eq!(d.syncs_failed(), 1);
    assert_eq!(fs::read(dir.path().join("f")).expect("backing"), b"");
    d.fsync(attr.ino, Some(fh)).expect("the next sync succeeds");
    assert_eq!(fs::read(dir.path().join("f")).expect("backing"), b"x");
}

#[test]
fn directory_operations_are_durable_at_once_by_default() {
    let (dir, mut d) = disk(DirSync::Immediate);
    let (_, fh) = d.create(ROOT, name("a"), 0o644).expect("create");
    d.release(fh);
    d.rename(ROOT, name("a"), ROOT, name("b")).expect("rename");
    let report = d.power_loss(Loss::Drop);
    assert_eq!(report.dir_ops_undone, 0);
    assert!(dir.path().join("b").exists() && !dir.path().join("a").exists());
}

#[test]
fn without_a_directory_sync_a_power_loss_undoes_creates_renames_and_unlinks() {
    let (dir, mut d) = disk(DirSync::Needed);
    let sub = d.mkdir(ROOT, name("db"), 0o755).expect("mkdir").ino;
    d.fsyncdir(ROOT).expect("the root synced: db is durable");
    // CURRENT, written and synced, then its directory synced: durable.
    let (cur, fh) = d.create(sub, name("CURRENT"), 0o644).expect("create");
    d.write(fh, 0, b"MANIFEST-1").expect("write");
    d.fsync(cur.ino, Some(fh)).expect("fsync");
    d.release(fh);
    let (_, fh) = d.create(sub, name("old"), 0o644).expect("create");
    d.release(fh);
    d.fsyncdir(sub).expect("CURRENT and old are durable");
    // The RocksDB way of replacing it, but without the directory sync at the end.
    let (tmp, fh) = d.create(sub, name("tmp"), 0o644).expect("create");
    d.write(fh, 0, b"MANIFEST-2").expect("write");
    d.fsync(tmp.ino, Some(fh)).expect("fsync");
    d.release(fh);
    d.rename(sub, name("tmp"), sub, name("CURRENT"))
        .expect("rename");
    let (_, fh) = d.create(sub, name("unsynced-new"), 0o644).expect("create");
    d.release(fh);
    d.remove(sub, name("unsynced-new"), false).expect("unlink");
    d.remove(sub, name("old"), false)
        .expect("unlink, never synced");

    let report = d.power_loss(Loss::Drop);
    assert_eq!(report.dir_ops_undone, 5, "{report:?}");
    let db = dir.path().join("db");
    assert_eq!(
        fs::read(db.join("CURRENT")).expect("CURRENT"),
        b"MANIFEST-1"
    );
    assert!(!db.join("tmp").exists() && !db.join("unsynced-new").exists());
    assert!(db.join("old").exists(), "an unlink never synced is undone");
    let trash: Vec<_> = fs::read_dir(dir.path().join(TRASH))
        .expect("trash")
        .collect();
    assert!(
        trash.is_empty(),
        "the trash is empty once everything is restored"
    );
}

#[test]
fn a_synced_directory_keeps_its_operations_and_empties_its_trash() {
    let (dir, mut d) = disk(DirSync::Needed);
    let (_, fh) = d.create(ROOT, name("a"), 0o644).expect("create");
    d.release(fh);
    let (_, fh) = d.create(ROOT, name("b"), 0o644).expect("create");
    d.release(fh);
    d.rename(ROOT, name("a"), ROOT, name("b"))
        .expect("rename over b");
    d.fsyncdir(ROOT).expect("fsyncdir");
    assert_eq!(d.power_loss(Loss::Drop).dir_ops_undone, 0);
    assert!(dir.path().join("b").exists() && !dir.path().join("a").exists());
    assert_eq!(
        fs::read_dir(dir.path().join(TRASH)).expect("trash").count(),
        0
    );
    let listed: Vec<_> = d
        .readdir(ROOT)
        .expect("readdir")
        .into_iter()
        .map(|e| e.2)
        .collect();
    assert_eq!(
        listed,
        vec![std::ffi::OsString::from("b")],
        "the trash is hidden"
    );
}

#[test]
fn names_that_are_not_one_plain_component_are_refused() {
    let (_dir, mut d) = disk(DirSync::Immediate);
    for bad in ["..", "a/b", ".", TRASH] {
        assert!(d.lookup(ROOT, name(bad)).is_err(), "{bad}");
        assert!(d.create(ROOT, name(bad), 0o644).is_err(), "{bad}");
    }
}
