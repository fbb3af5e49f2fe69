pub mod checker;
pub mod cluster;
pub mod netns;
pub mod procs;
