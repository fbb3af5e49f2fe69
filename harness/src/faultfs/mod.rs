//! A fault filesystem of the project's own, for tests: FUSE over a backing folder,
//! holding every file's writes until they are synced, so that a test can take away what
//! a power loss takes away, which a `kill -9` never does (the page cache survives it).
//!
//! | command | what the disk does |
//! |---|---|
//! | [`FaultFs::power_loss`] with [`Loss::Drop`] | loses every write not yet synced |
//! | [`FaultFs::power_loss`] with [`Loss::Torn`] | keeps a random prefix of them, the last one cut short |
//! | [`FaultFs::stall`] | holds every write and sync (files and folders) for a while |
//! | [`FaultFs::fail_syncs`] | answers the next syncs EIO, leaving the writes unsynced |
//!
//! What it models and what it does not, in detail: [`disk`] (the writes and the power
//! loss) and `fuse.rs` (what the kernel is told, and stalls). In short: syncs make a
//! file's data durable (`fsync` and `fdatasync` alike); directory operations are
//! durable at once ([`DirSync::Immediate`], LazyFS's default) or once their folders
//! are synced ([`DirSync::Needed`]); writes reach the disk in the order they were made;
//! `mmap` is not supported.
//!
//! **Where it runs.** The FUSE daemon is threads of the process that mounts it (the
//! test), in that process's mount namespace. A worker started afterwards with `ip
//! netns exec` gets a copy of that namespace and sees the mount; one started before
//! does not (`/` is a private mount here). So the netns suite mounts a worker's folder
//! before it starts the worker, and after a power loss starts the worker again on the
//! same mount.
//!
//! **Who can run it.** Mounting takes root (or `fusermount3` from `fuse3`, which this
//! harness does not use) and `/dev/fuse`: [`skip_reason`] says why it cannot run, and
//! tests skip unless `TENURE_FUSE_REQUIRE=1` (set by `.ci/run`).
//!
//! `TENURE_FAULTFS_TRACE=1` prints every error it answers a program (a path it does not
//! know, a refused name, an injected EIO) to stderr.

pub mod disk;
mod fuse;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use disk::{DirSync, Loss, LossReport};
use fuse::Shared;

/// The longest stall [`FaultFs::stall`] gives: a process blocked in a held request
/// cannot be killed, and the kernel's hung-task watchdog speaks at 120 s.
pub const MAX_STALL: Duration = Duration::from_secs(30);

/// The name the mounts carry in `/proc/self/mountinfo`.
pub const FS_NAME: &str = "tenure-faultfs";

/// Why the fault filesystem cannot be mounted here, or `None` if it can.
pub fn skip_reason() -> Option<String> {
    if std::env::var("TENURE_FUSE_SKIP").is_ok_and(|v| !v.is_empty() && v != "0") {
        return Some("TENURE_FUSE_SKIP is set".into());
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("mounting the fault filesystem needs root".into());
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return Some(format!(
            "cannot open /dev/fuse: {e} (modprobe fuse, or a container without it)"
        ));
    }
    None
}

/// Whether tests must fail instead of skipping when the fault filesystem cannot run
/// (`TENURE_FUSE_REQUIRE=1`, set by `.ci/run`).
pub fn required() -> bool {
    std::env::var("TENURE_FUSE_REQUIRE").is_ok_and(|v| !v.is_empty() && v != "0")
        && !std::env::var("TENURE_FUSE_SKIP").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `Some(reason)` if a test should skip: it cannot run here and is not required to.
/// Panics, naming the reason, if it is required and cannot run.
pub fn skip_test() -> Option<String> {
    let reason = skip_reason()?;
    assert!(
        !required(),
        "the fault filesystem is required (TENURE_FUSE_REQUIRE) but cannot run: {reason}"
    );
    eprintln!("skipped: {reason} (TENURE_FUSE_REQUIRE=1 makes this a failure)");
    Some(reason)
}

/// One mounted fault filesystem: a backing folder, and the mount point programs use.
/// Dropping it fails whatever a stall holds and detaches the mount.
pub struct FaultFs {
    backing: PathBuf,
    mountpoint: PathBuf,
    shared: Arc<Shared>,
    session: Option<fuser::BackgroundSession>,
    stall_thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultFs")
            .field("backing", &self.backing)
            .field("mountpoint", &self.mountpoint)
            .finish()
    }
}

impl FaultFs {
    /// Mounts a fault filesystem at `root/mnt` over `root/backing` (both created if
    /// missing; the backing folder keeps what an earlier mount made durable).
    pub fn mount(root: &Path, dir_sync: DirSync) -> io::Result<FaultFs> {
        let backing = root.join("backing");
        let mountpoint = root.join("mnt");
        std::fs::create_dir_all(&backing)?;
        std::fs::create_dir_all(&mountpoint)?;
        let shared = Shared::new(disk::Disk::new(&backing, dir_sync)?);
        let stall_thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("faultfs-stall".into())
                .spawn(move || shared.stall_thread())?
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![fuser::MountOption::FSName(FS_NAME.into())];
        let fs = fuse::FaultFs {
            shared: Arc::clone(&shared),
        };
        let mut this = FaultFs {
            backing,
            mountpoint: mountpoint.clone(),
            shared,
            session: None,
            stall_thread: Some(stall_thread),
        };
        this.session = Some(fuser::spawn_mount(fs, &mountpoint, &config).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot mount the fault filesystem at {}: {e}",
                    mountpoint.display()
                ),
            )
        })?);
        Ok(this)
    }

    /// Where programs read and write: the mount point.
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// The folder behind it: what is durable.
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// Holds every write and sync that arrives within `length` (at most
    /// [`MAX_STALL`]), and answers them, in order, when it is over.
    pub fn stall(&self, length: Duration) {
        let mut stall = self.shared.stall();
        stall.until = Some(Instant::now() + length.min(MAX_STALL));
        self.shared.stall_changed.notify_all();
    }

    /// Ends a stall now: what it holds is answered.
    pub fn end_stall(&self) {
        let mut stall = self.shared.stall();
        if stall.until.is_some() {
            stall.until = Some(Instant::now());
        }
        self.shared.stall_changed.notify_all();
    }

    /// Ends a stall by failing what it holds with EIO: a killed process blocked in a
    /// held request dies only once it is answered.
    pub fn fail_held(&self) {
        let mut stall = self.shared.stall();
        stall.until = None;
        self.shared.release_held(&mut stall, false);
    }

    /// Requests a stall holds now.
    pub fn held(&self) -> usize {
        self.shared.stall().held.len()
    }

    /// Requests stalls ever held.
    pub fn requests_held(&self) -> u64 {
        self.shared.stall().requests_held
    }

    /// Makes the next `n` syncs (files or folders) fail with EIO.
    pub fn fail_syncs(&self, n: u32) {
        self.shared.disk().fail_syncs(n);
    }

    /// From now on a folder's sync makes nothing durable (see
    /// [`disk::Disk::ignore_dir_syncs`]).
    pub fn ignore_dir_syncs(&self) {
        self.shared.disk().ignore_dir_syncs();
    }

    /// Syncs failed so far by [`FaultFs::fail_syncs`].
    pub fn syncs_failed(&self) -> u64 {
        self.shared.disk().syncs_failed()
    }

    /// Bytes written and not yet synced.
    pub fn unsynced_bytes(&self) -> u64 {
        self.shared.disk().unsynced_bytes()
    }

    /// A power loss: whatever a stall holds fails with EIO (it never reached the
    /// disk), then what was not synced is lost as `loss` says. Call it once the
    /// processes using the files are gone (killed and reaped); a process still writing
    /// would write on after the "power loss".
    pub fn power_loss(&self, loss: Loss) -> LossReport {
        let mut stall = self.shared.stall();
        stall.until = None;
        self.shared.release_held(&mut stall, false);
        let report = self.shared.disk().power_loss(loss);
        drop(stall);
        report
    }

    /// Unmounts: fails what a stall holds and detaches the mount (processes that still
    /// have it, in their own mount namespaces, keep it until they exit).
    pub fn unmount(mut self) -> io::Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> io::Result<()> {
        {
            let mut stall = self.shared.stall();
            stall.quit = true;
            stall.until = None;
            self.shared.release_held(&mut stall, false);
            self.shared.stall_changed.notify_all();
        }
        if let Some(thread) = self.stall_thread.take() {
            let _ = thread.join();
        }
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let path = std::ffi::CString::new(self.mountpoint.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mount point holds a NUL"))?;
        // SAFETY: `path` is a valid C string; MNT_DETACH unmounts lazily, so this
        // cannot block on the daemon (which is this process).
        let detached = if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        };
        // Its own unmount now finds nothing to unmount; its thread leaves when the
        // kernel closes the connection, so it is not joined.
        drop(session);
        detached
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}
