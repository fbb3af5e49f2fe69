//! The fault filesystem (`tenure_harness::faultfs`) through a real mount: what programs
//! see of held writes, power losses, stalls and failed syncs. Needs root and
//! `/dev/fuse`; skipped otherwise unless `TENURE_FUSE_REQUIRE=1` (`.ci/run`).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tenure_harness::faultfs::{skip_test, DirSync, FaultFs, Loss};

const WAIT: Duration = Duration::from_secs(10);

fn mounted(dir_sync: DirSync) -> Option<(tempfile::TempDir, FaultFs)> {
    if skip_test().is_some() {
        return None;
    }
    let root = tempfile::tempdir().expect("a temporary folder");
    let fs = FaultFs::mount(root.path(), dir_sync).expect("the fault filesystem mounts");
    Some((root, fs))
}

fn read(path: &Path) -> Vec<u8> {
    let mut data = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    data
}

/// Polls `cond` until it holds, or fails naming `what`.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_power_loss_takes_what_was_written_after_the_last_sync_and_nothing_before() {
    let Some((_root, fs)) = mounted(DirSync::Immediate) else {
        return;
    };
    let path = fs.path().join("wal");
    let mut f = File::create(&path).expect("create");
    f.write_all(b"synced record;").expect("write");
    f.sync_data().expect("fdatasync");
    f.write_all(b"unsynced record").expect("write");
    assert_eq!(
        read(&path),
        b"synced record;unsynced record",
        "reads see what was written"
    );
    assert_eq!(
        fs::metadata(&path).expect("stat").len(),
        29,
        "stat sees it too"
    );
    assert_eq!(
        fs::read(fs.backing().join("wal")).expect("backing"),
        b"synced record;"
    );
    drop(f);

    let report = fs.power_loss(Loss::Drop);
    assert_eq!((report.files, report.bytes_dropped), (1, 15), "{report:?}");
    assert_eq!(read(&path), b"synced record;");
    assert_eq!(fs::metadata(&path).expect("stat").len(), 14);
}

#[test]
fn a_torn_power_loss_keeps_part_of_an_unsynced_write() {
    let Some((_root, fs)) = mounted(DirSync::Immediate) else {
        return;
    };
    let path = fs.path().join("f");
    let mut kept = std::collections::BTreeSet::new();
    for seed in 0..16 {
        let mut f = File::create(&path).expect("create");
        f.sync_all().expect("the empty file is durable");
        f.write_all(&[7u8; 4096]).expect("write");
        drop(f);
        let report = fs.power_loss(Loss::Torn(seed));
        let data = read(&path);
        assert_eq!(
            data.len() as u64,
            report.bytes_kept,
            "seed {seed}: {report:?}"
        );
        assert!(
            data.iter().all(|b| *b == 7),
            "seed {seed}: only written bytes survive"
        );
        kept.insert(data.len());
    }
    assert!(
        kept.len() > 2,
        "torn losses keep different amounts: {kept:?}"
    );
}

#[test]
fn a_stall_holds_writes_and_syncs_until_it_ends_while_reads_go_on() {
    let Some((_root, fs)) = mounted(DirSync::Immediate) else {
        return;
    };
    fs::write(fs.path().join("other"), b"readable").expect("write");
    let path = fs.path().join("held");
    fs.stall(Duration::from_secs(20));
    let (done, finished) = mpsc::channel();
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            let mut f = File::create(&path).expect("create");
            let wrote = f.write_all(b"x").and_then(|()| f.sync_all());
            done.send(wrote).expect("the test waits");
        })
    };
    wait_until("the writer's write held", || fs.held() > 0);
    assert_eq!(
        read(&fs.path().join("other")),
        b"readable",
        "reads are not held"
    );
    assert!(
        finished.try_recv().is_err(),
        "the writer waits while the stall lasts"
    );
    fs.end_stall();
    let wrote = finished
        .recv_timeout(WAIT)
        .expect("the writer is answered once the stall ends");
    wrote.expect("the held write and sync succeed");
    writer.join().expect("the writer");
    assert!(
        fs.requests_held() >= 1,
        "its write was held (its sync came after the stall)"
    );
    assert_eq!(
        fs::read(fs.backing().join("held")).expect("backing"),
        b"x",
        "and the sync made it durable"
    );
}

#[test]
fn a_power_loss_during_a_stall_fails_what_it_holds_and_loses_it() {
    let Some((_root, fs)) = mounted(DirSync::Immediate) else {
        return;
    };
    let path = fs.path().join("f");
    let mut f = File::create(&path).expect("create");
    f.sync_all().expect("sync");
    fs.stall(Duration::from_secs(20));
    let writer =
        std::thread::spawn(move || f.write_all(b"never on disk").and_then(|()| f.sync_all()));
    wait_until("the write held", || fs.held() > 0);
    fs.power_loss(Loss::Drop);
    let err = writer
        .join()
        .expect("the writer")
        .expect_err("the held write fails");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(read(&path), b"");
}

#[test]
fn a_failed_fsync_reaches_the_program_as_eio_and_the_data_stays_unsynced() {
    let Some((_root, fs)) = mounted(DirSync::Immediate) else {
        return;
    };
    let path = fs.path().join("f");
    let mut f = File::create(&path).expect("create");
    f.write_all(b"data").expect("write");
    fs.fail_syncs(1);
    let err = f.sync_all().expect_err("the sync fails");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert_eq!(fs.syncs_failed(), 1);
    assert_eq!(
        fs.unsynced_bytes(),
        4,
        "what the failed sync had to write is still unsynced"
    );
    drop(f);
    fs.power_loss(Loss::Drop);
    assert_eq!(read(&path), b"");
}

#[test]
fn without_its_folder_synced_a_new_file_does_not_survive_a_power_loss() {
    let Some((_root, fs)) = mounted(DirSync::Needed) else {
        return;
    };
    let dir = fs.path().join("db");
    fs::create_dir(&dir).expect("mkdir");
    File::open(fs.path())
        .and_then(|d| d.sync_all())
        .expect("the root synced: db is durable");
    for (name, sync_dir) in [("synced-name", true), ("unsynced-name", false)] {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(name))
            .expect("create");
        f.write_all(name.as_bytes()).expect("write");
        f.sync_all().expect("the data synced");
        if sync_dir {
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .expect("the folder synced");
        }
    }
    let report = fs.power_loss(Loss::Drop);
    assert_eq!(report.dir_ops_undone, 1, "{report:?}");
    assert_eq!(read(&dir.join("synced-name")), b"synced-name");
    assert!(
        !dir.join("unsynced-name").exists(),
        "a file whose folder was never synced is gone"
    );
    let names: Vec<_> = fs::read_dir(fs.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("db")],
        "the trash stays hidden"
    );
}

#[test]
fn unmounting_answers_a_held_write_instead_of_hanging() {
    let Some((_root, fs)) = mounted(DirSync::Immediate) else {
        return;
    };
    let path = fs.path().join("f");
    let mut f = File::create(&path).expect("create");
    fs.stall(Duration::from_secs(20));
    let writer = std::thread::spawn(move || f.write_all(b"x"));
    wait_until("the write held", || fs.held() > 0);
    let started = Instant::now();
    fs.unmount().expect("unmount");
    let err = writer
        .join()
        .expect("the writer")
        .expect_err("the held write fails");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(
        started.elapsed() < WAIT,
        "the unmount did not wait for the stall's end"
    );
}
