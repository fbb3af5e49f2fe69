//! The fault filesystem's disk: what programs wrote, what they synced, and what a power
//! loss leaves of it. No FUSE here: [`Disk`] keeps a backing folder and the writes not
//! yet synced to it, and the FUSE layer (`fuse.rs`) calls it; its unit tests run it
//! directly, as any user.
//!
//! - **File data** is buffered per inode as the writes and truncations a program made
//!   since its last `fsync`/`fdatasync` (the two are the same here). Reads see the
//!   buffered data over the backing file, `stat` sees the buffered size. A sync applies
//!   the buffer to the backing file, which is then durable: the backing folder is what
//!   survives a power loss.
//! - **Directory operations** (create, mkdir, unlink, rmdir, rename) reach the backing
//!   folder at once. With [`DirSync::Immediate`] they are durable at once, as LazyFS
//!   has them. With [`DirSync::Needed`] each is journaled with how to undo it, and a
//!   power loss undoes, newest first, every one whose directories were not `fsync`ed
//!   since (POSIX's rule, stricter than ext4's journal). An unlinked or replaced file
//!   waits in a hidden trash folder until then.
//! - **A power loss** ([`Disk::power_loss`]) drops every buffered write, or with
//!   [`Loss::Torn`] keeps a random prefix of each file's buffered writes, the last one
//!   possibly cut short: a disk that wrote part of what it was given, in order. Writes
//!   that reach the platter out of order are not modelled.
//! - **A failed sync** ([`Disk::fail_syncs`]): the next syncs answer EIO and leave the
//!   writes buffered, so a later sync may still make them durable and a power loss
//!   drops them.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rand::Rng;

/// The hidden folder, in the backing folder's root, where unlinked and replaced files
/// wait for their directory's sync under [`DirSync::Needed`]. Programs never see it.
pub const TRASH: &str = ".faultfs-trash";

/// The root folder's inode, as FUSE numbers it.
pub const ROOT: u64 = 1;

/// When a directory operation is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DirSync {
    /// At once (LazyFS's default; ext4 nearly so).
    #[default]
    Immediate,
    /// Once every directory it changed has been `fsync`ed (POSIX).
    Needed,
}

/// What a power loss leaves of the writes not yet synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// Nothing.
    Drop,
    /// A random prefix of each file's writes, in the order they were made, the last
    /// one possibly cut short; drawn from this seed.
    Torn(u64),
}

/// What a power loss did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LossReport {
    /// Files that had writes not yet synced.
    pub files: usize,
    /// Bytes written but never synced that were lost.
    pub bytes_dropped: u64,
    /// Bytes written but never synced that a torn loss kept.
    pub bytes_kept: u64,
    /// Directory operations undone (only under [`DirSync::Needed`]).
    pub dir_ops_undone: usize,
}

/// One buffered change to a file.
#[derive(Debug, Clone)]
enum Change {
    Write { off: u64, data: Vec<u8> },
    Truncate(u64),
}

impl Change {
    fn bytes(&self) -> u64 {
        match self {
            Change::Write { data, .. } => data.len() as u64,
            Change::Truncate(_) => 0,
        }
    }
}

/// The changes made to one file since its last sync.
#[derive(Debug, Default)]
struct Buffered {
    changes: Vec<Change>,
}

impl Buffered {
    /// The file's size once the changes are applied to a file of `durable` bytes.
    fn size(&self, durable: u64) -> u64 {
        self.changes.iter().fold(durable, |size, c| match c {
            Change::Write { off, data } => size.max(off + data.len() as u64),
            Change::Truncate(s) => *s,
        })
    }

    /// Lays the changes over `window`, which holds the durable bytes from `start` on.
    fn overlay(&self, start: u64, window: &mut [u8]) {
        let end = start + window.len() as u64;
        for change in &self.changes {
            match change {
                Change::Write { off, data } => {
                    let from = (*off).max(start);
                    let to = (off + data.len() as u64).min(end);
                    if from < to {
                        let src = &data[(from - off) as usize..(to - off) as usize];
                        window[(from - start) as usize..(to - start) as usize].copy_from_slice(src);
                    }
                }
                Change::Truncate(s) => {
                    if *s < end {
                        let from = s.saturating_sub(start) as usize;
                        window[from..].fill(0);
                    }
                }
            }
        }
    }
}

/// How to take back one directory operation.
#[derive(Debug)]
enum Undo {
    /// A name that was created: remove it.
    Remove(PathBuf),
    /// A name whose file went to the trash: bring it back.
    Restore { trash: PathBuf, to: PathBuf },
    /// A rename: move `to` back to `from`.
    MoveBack { from: PathBuf, to: PathBuf },
}

/// A directory operation not yet durable ([`DirSync::Needed`]).
#[derive(Debug)]
struct Journaled {
    /// Applied newest first.
    undo: Vec<Undo>,
    /// The directories it changed that have not been synced since.
    unsynced: Vec<PathBuf>,
    /// Trash it may delete once durable.
    trash: Vec<PathBuf>,
}

/// Inode numbers for paths (relative to the backing folder; the root is the empty path).
#[derive(Debug)]
struct Nodes {
    path: HashMap<u64, PathBuf>,
    ino: HashMap<PathBuf, u64>,
    next: u64,
}

impl Nodes {
    fn new() -> Nodes {
        let mut nodes = Nodes {
            path: HashMap::new(),
            ino: HashMap::new(),
            next: ROOT + 1,
        };
        nodes.path.insert(ROOT, PathBuf::new());
        nodes.ino.insert(PathBuf::new(), ROOT);
        nodes
    }

    fn ino(&mut self, rel: &Path) -> u64 {
        if let Some(ino) = self.ino.get(rel) {
            return *ino;
        }
        let ino = self.next;
        self.next += 1;
        self.path.insert(ino, rel.to_path_buf());
        self.ino.insert(rel.to_path_buf(), ino);
        ino
    }

    /// `from` (and everything under it) is now called `to`.
    fn moved(&mut self, from: &Path, to: &Path) {
        self.forget(to);
        let moving: Vec<(PathBuf, u64)> = self
            .ino
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        for (old, ino) in moving {
            self.ino.remove(&old);
            // (`join` of an empty path would add a trailing slash.)
            let rest = old.strip_prefix(from).expect("filtered on the prefix");
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.path.insert(ino, new.clone());
            self.ino.insert(new, ino);
        }
    }

    /// `rel` (and everything under it) has no name any more. Its inodes stay valid for
    /// handles still open on them.
    fn forget(&mut self, rel: &Path) {
        let gone: Vec<PathBuf> = self
            .ino
            .keys()
            .filter(|p| p.starts_with(rel))
            .cloned()
            .collect();
        for p in gone {
            if let Some(ino) = self.ino.remove(&p) {
                self.path.remove(&ino);
            }
        }
    }
}

/// An open file.
#[derive(Debug)]
struct Handle {
    ino: u64,
    file: File,
}

/// A file's attributes as the fault filesystem shows them: the backing file's, with
/// its inode number and the size its buffered writes give it.
#[derive(Debug)]
pub struct Attr {
    /// Its inode number here (not the backing file's).
    pub ino: u64,
    /// Its size with the writes not yet synced.
    pub size: u64,
    /// The backing file's metadata.
    pub meta: Metadata,
}

/// The disk behind one mount: see the module's docs.
#[derive(Debug)]
pub struct Disk {
    backing: PathBuf,
    dir_sync: DirSync,
    nodes: Nodes,
    buffered: HashMap<u64, Buffered>,
    handles: HashMap<u64, Handle>,
    next_fh: u64,
    journal: Vec<Journaled>,
    trash_seq: u64,
    failing_syncs: u32,
    syncs_failed: u64,
    ignoring_dir_syncs: bool,
}

fn einval(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

fn enoent() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOENT)
}

impl Disk {
    /// A disk over `backing`, an existing folder that only this disk changes from now on.
    pub fn new(backing: &Path, dir_sync: DirSync) -> io::Result<Disk> {
        let meta = fs::metadata(backing)?;
        if !meta.is_dir() {
            return Err(einval(
                "the fault filesystem's backing path is not a folder",
            ));
        }
        Ok(Disk {
            backing: backing.to_path_buf(),
            dir_sync,
            nodes: Nodes::new(),
            buffered: HashMap::new(),
            handles: HashMap::new(),
            next_fh: 1,
            journal: Vec::new(),
            trash_seq: 0,
            failing_syncs: 0,
            syncs_failed: 0,
            ignoring_dir_syncs: false,
        })
    }

    fn abs(&self, rel: &Path) -> PathBuf {
        self.backing.join(rel)
    }

    fn path(&self, ino: u64) -> io::Result<PathBuf> {
        self.nodes.path.get(&ino).cloned().ok_or_else(enoent)
    }

    /// The path of `name` in directory `parent`, refusing names that are not one
    /// plain component and the trash in the root.
    fn child(&self, parent: u64, name: &OsStr) -> io::Result<PathBuf> {
        let dir = self.path(parent)?;
        let mut comps = Path::new(name).components();
        match (comps.next(), comps.next()) {
            (Some(std::path::Component::Normal(n)), None) if n == name => {}
            _ => return Err(einval("not a plain file name")),
        }
        if dir.as_os_str().is_empty() && name == TRASH {
            return Err(enoent());
        }
        Ok(dir.join(name))
    }

    fn attr_of(&mut self, rel: &Path, meta: Metadata) -> Attr {
        let ino = self.nodes.ino(rel);
        self.attr_with(ino, meta)
    }

    fn attr_with(&self, ino: u64, meta: Metadata) -> Attr {
        let size = match self.buffered.get(&ino) {
            Some(b) if meta.is_file() => b.size(meta.len()),
            _ => meta.len(),
        };
        Attr { ino, size, meta }
    }

    /// `name` in directory `parent`.
    pub fn lookup(&mut self, parent: u64, name: &OsStr) -> io::Result<Attr> {
        let rel = self.child(parent, name)?;
        let meta = fs::symlink_metadata(self.abs(&rel))?;
        Ok(self.attr_of(&rel, meta))
    }

    /// The attributes of `ino`, through its open handle `fh` if it has one (an
    /// unlinked file has no path any more).
    pub fn getattr(&self, ino: u64, fh: Option<u64>) -> io::Result<Attr> {
        let meta = match fh.and_then(|fh| self.handles.get(&fh)) {
            Some(h) if h.ino == ino => h.file.metadata()?,
            _ => fs::symlink_metadata(self.abs(&self.path(ino)?))?,
        };
        Ok(self.attr_with(ino, meta))
    }

    /// Sets the size of `ino` (`truncate`, `O_TRUNC`): buffered like a write; and its
    /// permissions, at once.
    pub fn setattr(
        &mut self,
        ino: u64,
        fh: Option<u64>,
        size: Option<u64>,
        mode: Option<u32>,
    ) -> io::Result<Attr> {
        if let Some(mode) = mode {
            let path = self.abs(&self.path(ino)?);
            fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o7777))?;
        }
        if let Some(size) = size {
            if !self.getattr(ino, fh)?.meta.is_file() {
                return Err(io::Error::from_raw_os_error(libc::EISDIR));
            }
            self.buffered
                .entry(ino)
                .or_default()
                .changes
                .push(Change::Truncate(size));
        }
        self.getattr(ino, fh)
    }

    fn open_backing(path: &Path, create: Option<u32>) -> io::Result<File> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if let Some(mode) = create {
            opts.create_new(true).mode(mode & 0o7777);
        }
        match opts.open(path) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied && create.is_none() => {
                OpenOptions::new().read(true).open(path)
            }
            other => other,
        }
    }

    fn new_handle(&mut self, ino: u64, file: File) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, Handle { ino, file });
        fh
    }

    /// Opens `ino`; the handle reads and writes through this disk.
    pub fn open(&mut self, ino: u64) -> io::Result<u64> {
        let file = Disk::open_backing(&self.abs(&self.path(ino)?), None)?;
        Ok(self.new_handle(ino, file))
    }

    /// Closes handle `fh`.
    pub fn release(&mut self, fh: u64) {
        self.handles.remove(&fh);
    }

    /// Creates file `name` in `parent` and opens it.
    pub fn create(&mut self, parent: u64, name: &OsStr, mode: u32) -> io::Result<(Attr, u64)> {
        let rel = self.child(parent, name)?;
        let file = Disk::open_backing(&self.abs(&rel), Some(mode))?;
        self.journal_op(vec![Undo::Remove(rel.clone())], &[&rel], Vec::new());
        let attr = self.attr_of(&rel, file.metadata()?);
        let fh = self.new_handle(attr.ino, file);
        Ok((attr, fh))
    }

    /// Creates folder `name` in `parent`.
    pub fn mkdir(&mut self, parent: u64, name: &OsStr, mode: u32) -> io::Result<Attr> {
        let rel = self.child(parent, name)?;
        let abs = self.abs(&rel);
        fs::create_dir(&abs)?;
        fs::set_permissions(&abs, fs::Permissions::from_mode(mode & 0o7777))?;
        self.journal_op(vec![Undo::Remove(rel.clone())], &[&rel], Vec::new());
        let meta = fs::symlink_metadata(&abs)?;
        Ok(self.attr_of(&rel, meta))
    }

    /// Reads up to `len` bytes of handle `fh` from `off`: the buffered writes over the
    /// backing file.
    pub fn read(&self, fh: u64, off: u64, len: u32) -> io::Result<Vec<u8>> {
        let h = self
            .handles
            .get(&fh)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let durable = h.file.metadata()?.len();
        let buffered = self.buffered.get(&h.ino);
        let size = buffered.map_or(durable, |b| b.size(durable));
        let end = size.min(off.saturating_add(u64::from(len)));
        if end <= off {
            return Ok(Vec::new());
        }
        let mut window = vec![0; (end - off) as usize];
        let from_disk = durable.min(end).saturating_sub(off) as usize;
        let mut read = 0;
        while read < from_disk {
            match h
                .file
                .read_at(&mut window[read..from_disk], off + read as u64)?
            {
                0 => break,
                n => read += n,
            }
        }
        if let Some(b) = buffered {
            b.overlay(off, &mut window);
        }
        Ok(window)
    }

    /// Buffers a write to handle `fh`.
    pub fn write(&mut self, fh: u64, off: u64, data: &[u8]) -> io::Result<u32> {
        let ino = self
            .handles
            .get(&fh)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?
            .ino;
        let len = u32::try_from(data.len()).map_err(|_| einval("write too large"))?;
        off.checked_add(data.len() as u64)
            .ok_or_else(|| einval("write past the largest offset"))?;
        let buffered = self.buffered.entry(ino).or_default();
        // Consecutive writes (a log's appends) are kept as one change.
        if let Some(Change::Write {
            off: last_off,
            data: last,
        }) = buffered.changes.last_mut()
        {
            if *last_off + last.len() as u64 == off {
                last.extend_from_slice(data);
                return Ok(len);
            }
        }
        buffered.changes.push(Change::Write {
            off,
            data: data.to_vec(),
        });
        Ok(len)
    }

    /// Makes the next `n` syncs (of files and folders) fail with EIO.
    pub fn fail_syncs(&mut self, n: u32) {
        self.failing_syncs = n;
    }

    /// From now on a folder's sync answers success and makes nothing durable: a broken
    /// disk (or a program that never syncs its folders), for a test to show that the
    /// strict mode ([`DirSync::Needed`]) catches it.
    pub fn ignore_dir_syncs(&mut self) {
        self.ignoring_dir_syncs = true;
    }

    /// How many syncs failed because of [`Disk::fail_syncs`].
    pub fn syncs_failed(&self) -> u64 {
        self.syncs_failed
    }

    fn sync_fault(&mut self) -> io::Result<()> {
        if self.failing_syncs > 0 {
            self.failing_syncs -= 1;
            self.syncs_failed += 1;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    /// `fsync`/`fdatasync` of `ino` (through handle `fh`): its buffered writes become
    /// durable.
    pub fn fsync(&mut self, ino: u64, fh: Option<u64>) -> io::Result<()> {
        self.sync_fault()?;
        let Some(buffered) = self.buffered.remove(&ino) else {
            return Ok(());
        };
        let result = self.apply(ino, fh, &buffered.changes, None);
        if result.is_err() {
            self.buffered.insert(ino, buffered);
        }
        result
    }

    /// Applies `changes` to the backing file of `ino`, through `fh` or any handle open
    /// on it, else its path; the last change cut to `cut` bytes if given.
    fn apply(
        &self,
        ino: u64,
        fh: Option<u64>,
        changes: &[Change],
        cut: Option<usize>,
    ) -> io::Result<()> {
        let handle = fh
            .and_then(|fh| self.handles.get(&fh))
            .filter(|h| h.ino == ino)
            .or_else(|| self.handles.values().find(|h| h.ino == ino));
        let opened;
        let file = match handle {
            Some(h) => &h.file,
            None => {
                let Ok(path) = self.path(ino) else {
                    return Ok(());
                }; // gone: nothing to keep
                opened = OpenOptions::new().write(true).open(self.abs(&path))?;
                &opened
            }
        };
        for (i, change) in changes.iter().enumerate() {
            let last = i + 1 == changes.len();
            match change {
                Change::Write { off, data } => {
                    let data = match cut {
                        Some(n) if last => &data[..n.min(data.len())],
                        _ => &data[..],
                    };
                    file.write_all_at(data, *off)?;
                }
                Change::Truncate(size) => file.set_len(*size)?,
            }
        }
        Ok(())
    }

    /// `fsync` of folder `ino`: the directory operations it took part in are durable
    /// once every folder they changed is synced.
    pub fn fsyncdir(&mut self, ino: u64) -> io::Result<()> {
        self.sync_fault()?;
        if self.ignoring_dir_syncs {
            return Ok(());
        }
        let dir = self.path(ino)?;
        let mut durable = Vec::new();
        self.journal.retain_mut(|j| {
            j.unsynced.retain(|d| *d != dir);
            if j.unsynced.is_empty() {
                durable.append(&mut j.trash);
                false
            } else {
                true
            }
        });
        for trash in durable {
            let abs = self.abs(&trash);
            let _ = fs::remove_dir_all(&abs).or_else(|_| fs::remove_file(&abs));
            self.nodes.forget(&trash);
        }
        Ok(())
    }

    /// Journals a directory operation that changed the folders holding `names`.
    fn journal_op(&mut self, undo: Vec<Undo>, names: &[&Path], trash: Vec<PathBuf>) {
        if self.dir_sync == DirSync::Immediate {
            return;
        }
        let mut unsynced: Vec<PathBuf> = Vec::new();
        for name in names {
            let dir = name.parent().unwrap_or(Path::new("")).to_path_buf();
            if !unsynced.contains(&dir) {
                unsynced.push(dir);
            }
        }
        self.journal.push(Journaled {
            undo,
            unsynced,
            trash,
        });
    }

    /// Moves `rel` into the trash; returns its name there.
    fn move_to_trash(&mut self, rel: &Path) -> io::Result<PathBuf> {
        let trash_dir = self.abs(Path::new(TRASH));
        fs::create_dir_all(&trash_dir)?;
        self.trash_seq += 1;
        let trash = Path::new(TRASH).join(self.trash_seq.to_string());
        fs::rename(self.abs(rel), self.abs(&trash))?;
        self.nodes.moved(rel, &trash);
        Ok(trash)
    }

    /// Removes `name` from `parent` (a file with `unlink`, an empty folder with `rmdir`).
    pub fn remove(&mut self, parent: u64, name: &OsStr, dir: bool) -> io::Result<()> {
        let rel = self.child(parent, name)?;
        let abs = self.abs(&rel);
        let meta = fs::symlink_metadata(&abs)?;
        match (dir, meta.is_dir()) {
            (true, false) => return Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
            (false, true) => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
            (true, true) if fs::read_dir(&abs)?.next().is_some() => {
                return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
            }
            _ => {}
        }
        if self.dir_sync == DirSync::Immediate {
            if dir {
                fs::remove_dir(&abs)?;
            } else {
                fs::remove_file(&abs)?;
            }
            self.nodes.forget(&rel);
            return Ok(());
        }
        let trash = self.move_to_trash(&rel)?;
        self.journal_op(
            vec![Undo::Restore {
                trash: trash.clone(),
                to: rel.clone(),
            }],
            &[&rel],
            vec![trash],
        );
        Ok(())
    }

    /// Renames `name` in `parent` to `new_name` in `new_parent`, replacing what was there.
    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
    ) -> io::Result<()> {
        let from = self.child(parent, name)?;
        let to = self.child(new_parent, new_name)?;
        if to.starts_with(&from) && to != from {
            return Err(einval("cannot move a folder into itself"));
        }
        let from_meta = fs::symlink_metadata(self.abs(&from))?;
        let replaced = match fs::symlink_metadata(self.abs(&to)) {
            Ok(meta) if meta.is_dir() != from_meta.is_dir() => {
                let code = if meta.is_dir() {
                    libc::EISDIR
                } else {
                    libc::ENOTDIR
                };
                return Err(io::Error::from_raw_os_error(code));
            }
            Ok(meta) if meta.is_dir() && fs::read_dir(self.abs(&to))?.next().is_some() => {
                return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
            }
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        if from == to {
            return Ok(());
        }
        if self.dir_sync == DirSync::Immediate {
            fs::rename(self.abs(&from), self.abs(&to))?;
            self.nodes.moved(&from, &to);
            return Ok(());
        }
        let mut undo = Vec::new();
        let mut trash = Vec::new();
        if replaced {
            let t = self.move_to_trash(&to)?;
            undo.push(Undo::Restore {
                trash: t.clone(),
                to: to.clone(),
            });
            trash.push(t);
        }
        fs::rename(self.abs(&from), self.abs(&to))?;
        self.nodes.moved(&from, &to);
        undo.push(Undo::MoveBack {
            from: from.clone(),
            to: to.clone(),
        });
        self.journal_op(undo, &[&from, &to], trash);
        Ok(())
    }

    /// The entries of folder `ino`, without `.` and `..` (and without the trash).
    pub fn readdir(
        &mut self,
        ino: u64,
    ) -> io::Result<Vec<(u64, fs::FileType, std::ffi::OsString)>> {
        let dir = self.path(ino)?;
        let mut entries = Vec::new();
        for entry in fs::read_dir(self.abs(&dir))? {
            let entry = entry?;
            let name = entry.file_name();
            if dir.as_os_str().is_empty() && name == TRASH {
                continue;
            }
            let ino = self.nodes.ino(&dir.join(&name));
            entries.push((ino, entry.file_type()?, name));
        }
        Ok(entries)
    }

    /// The backing folder's file system figures (`statvfs`).
    pub fn statfs(&self) -> io::Result<libc::statvfs> {
        let path = std::ffi::CString::new(self.backing.as_os_str().as_encoded_bytes())
            .map_err(|_| einval("backing path holds a NUL"))?;
        // SAFETY: `path` is a valid C string and `out` a valid statvfs to fill.
        let mut out: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut out) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(out)
    }

    /// Bytes written and not yet synced, over every file.
    pub fn unsynced_bytes(&self) -> u64 {
        self.buffered
            .values()
            .flat_map(|b| &b.changes)
            .map(Change::bytes)
            .sum()
    }

    /// A power loss: what was not synced is lost (see [`Loss`]); journaled directory
    /// operations not yet durable are undone. Call it when no program has the files
    /// open: the handles still open are closed.
    pub fn power_loss(&mut self, loss: Loss) -> LossReport {
        let mut report = LossReport::default();
        let mut rng: Option<rand::rngs::StdRng> = match loss {
            Loss::Drop => None,
            Loss::Torn(seed) => Some(rand::SeedableRng::seed_from_u64(seed)),
        };
        let mut buffered: Vec<(u64, Buffered)> = self.buffered.drain().collect();
        buffered.sort_by_key(|(ino, _)| *ino); // the seed decides, not the hash map
        for (ino, b) in buffered {
            let total: u64 = b.changes.iter().map(Change::bytes).sum();
            report.files += 1;
            let kept = match rng.as_mut() {
                None => 0,
                Some(rng) => {
                    let n = rng.gen_range(0..=b.changes.len());
                    let cut = match b.changes.get(n) {
                        Some(Change::Write { data, .. }) if !data.is_empty() => {
                            rng.gen_range(0..data.len())
                        }
                        _ => 0,
                    };
                    let (keep, cut) = if cut > 0 {
                        (&b.changes[..=n], Some(cut))
                    } else {
                        (&b.changes[..n], None)
                    };
                    match self.apply(ino, None, keep, cut) {
                        Ok(()) => {
                            let whole: u64 = keep.iter().map(Change::bytes).sum();
                            whole
                                - cut.map_or(0, |c| keep.last().map_or(0, Change::bytes) - c as u64)
                        }
                        Err(_) => 0,
                    }
                }
            };
            report.bytes_kept += kept;
            report.bytes_dropped += total - kept;
        }
        for j in std::mem::take(&mut self.journal).into_iter().rev() {
            report.dir_ops_undone += 1;
            for undo in j.undo.into_iter().rev() {
                self.undo(undo);
            }
        }
        self.handles.clear();
        report
    }

    fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Remove(rel) => {
                let abs = self.abs(&rel);
                let _ = fs::remove_dir_all(&abs).or_else(|_| fs::remove_file(&abs));
                if let Some(ino) = self.nodes.ino.get(&rel) {
                    self.buffered.remove(ino);
                }
                self.nodes.forget(&rel);
            }
            Undo::Restore { trash, to } => {
                if fs::rename(self.abs(&trash), self.abs(&to)).is_ok() {
                    self.nodes.moved(&trash, &to);
                }
            }
            Undo::MoveBack { from, to } => {
                if fs::rename(self.abs(&to), self.abs(&from)).is_ok() {
                    self.nodes.moved(&to, &from);
                }
            }
        }
    }
}
