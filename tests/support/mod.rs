pub(crate) mod cluster;
pub(crate) mod kit;
pub(crate) mod netns;
pub(crate) mod procs;

/// The history checker, as the tests have always named it (it is the kit's).
pub(crate) use kit::checker;
