pub(crate) mod cluster;
pub(crate) mod kit;
pub(crate) mod netns;
pub(crate) mod procs;

/// The history checker, as the tests have always named it (it is the kit's).
pub(crate) use kit::checker;

/// A backup of group `group` taken now by its leader, node 1, at root term `term`, with
/// `voters` and no history or elections: what tests edit into the backup they need.
#[allow(dead_code)] // not every test file restores
pub(crate) fn backup_taken_now(
    group: tenure::GroupId,
    term: u64,
    voters: Vec<tenure::NodeId>,
) -> tenure::backup::Backup {
    tenure::backup::Backup {
        version: tenure::backup::BACKUP_VERSION,
        group,
        taken_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        taken_by: 1,
        taken_from_leader: true,
        term,
        members: tenure::Membership {
            voters,
            ..Default::default()
        },
        history: vec![],
        next_election_id: 1,
        elections: Default::default(),
    }
}
