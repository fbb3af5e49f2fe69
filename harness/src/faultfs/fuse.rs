//! The fault filesystem's FUSE side: the kernel's requests turned into calls on the
//! [`Disk`], and writes and syncs held while the disk stalls.
//!
//! The kernel is told to keep nothing: every open file is `FOPEN_DIRECT_IO` (no page
//! cache, so a read after a power loss reaches the disk), and attributes and names are
//! cached for no time (a name a power loss undid is looked up again). fuser's default
//! INIT flags ask for no writeback cache, so each `write(2)` arrives here, in order; and
//! no POSIX locks, so RocksDB's `LOCK` file is locked by the kernel itself.
//!
//! **Stalls.** While a stall lasts, every write, truncation and sync (of files and
//! folders) waits, in arrival order, in a queue that a thread of its own answers when
//! the stall ends; reads, lookups and everything else are answered at once. A process
//! blocked in a stalled request cannot be killed until it is answered (FUSE waits out
//! a request the daemon has read), so a stall always has an end, and a power loss or
//! an unmount first fails what is held with EIO.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use super::disk::{Attr, Disk};

/// How long the kernel may trust an answer: not at all.
const TTL: Duration = Duration::ZERO;

/// A request held by a stall: run with the disk when the stall ends, or failed with
/// EIO (`false`) when a power loss or an unmount cuts it short.
type Held = Box<dyn FnOnce(&mut Disk, bool) + Send>;

/// What the stall thread and the filesystem share.
#[derive(Default)]
pub(super) struct Stall {
    /// Until when writes and syncs wait; `None` when the disk is not stalled.
    pub(super) until: Option<Instant>,
    pub(super) held: VecDeque<Held>,
    /// Requests ever held.
    pub(super) requests_held: u64,
    /// Ask the stall thread to leave.
    pub(super) quit: bool,
}

/// The state behind one mount.
pub(super) struct Shared {
    /// Lock order: `stall`, then `disk`.
    pub(super) stall: Mutex<Stall>,
    pub(super) stall_changed: Condvar,
    pub(super) disk: Mutex<Disk>,
}

impl Shared {
    pub(super) fn new(disk: Disk) -> Arc<Shared> {
        Arc::new(Shared {
            stall: Mutex::default(),
            stall_changed: Condvar::new(),
            disk: Mutex::new(disk),
        })
    }

    pub(super) fn stall(&self) -> MutexGuard<'_, Stall> {
        self.stall
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn disk(&self) -> MutexGuard<'_, Disk> {
        self.disk
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `op` now, or holds it if the disk is stalled (or requests are still held:
    /// they go first).
    fn write_op(&self, op: impl FnOnce(&mut Disk, bool) + Send + 'static) {
        let mut stall = self.stall();
        if stall.until.is_some() || !stall.held.is_empty() {
            stall.requests_held += 1;
            stall.held.push_back(Box::new(op));
            return;
        }
        op(&mut self.disk(), true);
    }

    /// A sync (of a file or a folder): run through [`Shared::write_op`], answered empty.
    fn held_sync(
        &self,
        reply: ReplyEmpty,
        sync: impl FnOnce(&mut Disk) -> io::Result<()> + Send + 'static,
    ) {
        self.write_op(move |disk, run| {
            if !run {
                return reply.error(Errno::EIO);
            }
            match sync(disk) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    /// Answers every held request: run (`true`) or failed with EIO (`false`).
    pub(super) fn release_held(&self, stall: &mut Stall, run: bool) {
        let held: Vec<Held> = stall.held.drain(..).collect();
        let mut disk = self.disk();
        for op in held {
            op(&mut disk, run);
        }
    }

    /// The stall thread: answers the held requests when the stall ends.
    pub(super) fn stall_thread(self: Arc<Shared>) {
        let mut stall = self.stall();
        loop {
            if stall.quit {
                self.release_held(&mut stall, false);
                return;
            }
            match stall.until {
                Some(until) if Instant::now() < until => {
                    let wait = until - Instant::now();
                    stall = self
                        .stall_changed
                        .wait_timeout(stall, wait)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
                Some(_) => {
                    stall.until = None;
                    self.release_held(&mut stall, true);
                }
                None => {
                    if !stall.held.is_empty() {
                        self.release_held(&mut stall, true);
                    }
                    stall = self
                        .stall_changed
                        .wait(stall)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
        }
    }
}

/// The kernel's view of an [`Attr`].
fn file_attr(a: &Attr) -> FileAttr {
    use std::os::unix::fs::MetadataExt;
    let m = &a.meta;
    let kind = if m.is_dir() {
        FileType::Directory
    } else if m.file_type().is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    };
    let time = |secs: i64, nsecs: i64| {
        let since = Duration::new(secs.max(0) as u64, nsecs.clamp(0, 999_999_999) as u32);
        SystemTime::UNIX_EPOCH + since
    };
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
        crtime: time(m.ctime(), m.ctime_nsec()),
        kind,
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn errno(e: &io::Error) -> Errno {
    if std::env::var_os("TENURE_FAULTFS_TRACE").is_some() {
        eprintln!("faultfs: answered {e}");
    }
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

/// The filesystem fuser serves.
pub(super) struct FaultFs {
    pub(super) shared: Arc<Shared>,
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.shared.disk().lookup(parent.0, name) {
            Ok(a) => reply.entry(&TTL, &file_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.shared.disk().getattr(ino.0, fh.map(|f| f.0)) {
            Ok(a) => reply.attr(&TTL, &file_attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let fh = fh.map(|f| f.0);
        let op = move |disk: &mut Disk, run: bool| {
            if !run {
                return reply.error(Errno::EIO);
            }
            match disk.setattr(ino.0, fh, size, mode) {
                Ok(a) => reply.attr(&TTL, &file_attr(&a)),
                Err(e) => reply.error(errno(&e)),
            }
        };
        if size.is_some() {
            self.shared.write_op(op);
        } else {
            op(&mut self.shared.disk(), true);
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.shared.disk().mkdir(parent.0, name, mode & !umask) {
            Ok(a) => reply.entry(&TTL, &file_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.shared.disk().remove(parent.0, name, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.shared.disk().remove(parent.0, name, true) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL); // RENAME_NOREPLACE and the like: not modelled
        }
        match self
            .shared
            .disk()
            .rename(parent.0, name, newparent.0, newname)
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.shared.disk().open(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.shared.disk().create(parent.0, name, mode & !umask) {
            Ok((a, fh)) => reply.created(
                &TTL,
                &file_attr(&a),
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.shared.disk().read(fh.0, offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let data = data.to_vec();
        self.shared.write_op(move |disk, run| {
            if !run {
                return reply.error(Errno::EIO);
            }
            match disk.write(fh.0, offset, &data) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok(); // a close: nothing becomes durable (never stalled: FUSE cannot interrupt it)
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.shared.disk().release(fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.shared
            .held_sync(reply, move |disk| disk.fsync(ino.0, Some(fh.0)));
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let entries = match self.shared.disk().readdir(ino.0) {
            Ok(entries) => entries,
            Err(e) => return reply.error(errno(&e)),
        };
        let dots = [
            (ino.0, FileType::Directory, ".".into()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        let all = dots
            .into_iter()
            .chain(entries.into_iter().map(|(ino, t, name)| {
                let kind = if t.is_dir() {
                    FileType::Directory
                } else if t.is_symlink() {
                    FileType::Symlink
                } else {
                    FileType::RegularFile
                };
                (ino, kind, name)
            }));
        // An entry's offset is where the next readdir of this folder starts.
        for (i, (ino, kind, name)) in all.enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.shared
            .held_sync(reply, move |disk| disk.fsyncdir(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.shared.disk().statfs() {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
