//! Placing a job's tasks across nodes by leaf switch: the tasks fill the nodes of as few
//! leaves as hold them, the leaves with the most free nodes first, each node's tasks in a
//! block, so that neighbouring ranks (which talk most in most codes) share a node, then a
//! leaf, and the job's traffic crosses as few spines as it can. What Slurm's
//! `topology/tree` does for whole nodes, for task lists a launcher takes
//! (`SLURM_HOSTFILE` with `srun --distribution=arbitrary`, a hostfile for `mpirun`).

use std::collections::HashMap;

use serde::Serialize;

use super::Topology;

/// Most tasks placed at once (each is a line of the hostfile).
pub const MAX_TASKS: u32 = 1 << 22;

/// Why tasks cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpreadError {
    /// No tasks, or none per node.
    #[error("nothing to place: give at least one task and one task per node")]
    Nothing,
    /// More tasks than [`MAX_TASKS`].
    #[error("{0} tasks: at most {MAX_TASKS} are placed at once")]
    TooMany(u32),
    /// A host the fabric does not have.
    #[error("{0} is no host of this fabric (maestro inventory --fabric lists them)")]
    UnknownHost(String),
    /// A host named twice.
    #[error("host {0} is named twice")]
    Duplicate(String),
    /// Not enough nodes for the tasks.
    #[error(
        "{tasks} tasks at {per_node} per node need {needed} nodes; {available} given: give more hosts or more tasks per node"
    )]
    TooFew {
        /// The tasks.
        tasks: u32,
        /// Tasks per node.
        per_node: u32,
        /// Nodes needed.
        needed: usize,
        /// Nodes given.
        available: usize,
    },
}

/// Where one task goes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskPlace {
    /// The task (rank), from 0.
    pub task: u32,
    /// Its node.
    pub host: String,
    /// The leaf switch the node hangs off (`-` for a host linked to none).
    pub leaf: String,
}

/// `tasks` tasks, `per_node` on each node, over `hosts` (names of the fabric's hosts, the
/// nodes the job may use; all of them when `None`), leaf by leaf.
///
/// # Errors
/// [`SpreadError`]: nothing to place, a host the fabric lacks or named twice, too few
/// nodes.
pub fn spread(
    t: &Topology,
    hosts: Option<&[String]>,
    tasks: u32,
    per_node: u32,
) -> Result<Vec<TaskPlace>, SpreadError> {
    if tasks == 0 || per_node == 0 {
        return Err(SpreadError::Nothing);
    }
    if tasks > MAX_TASKS {
        return Err(SpreadError::TooMany(tasks));
    }
    let all: Vec<String>;
    let hosts = match hosts {
        Some(h) => h,
        None => {
            all = t.hosts.iter().map(|h| h.name.clone()).collect();
            &all
        }
    };
    let known: HashMap<&str, usize> = (t.hosts.iter().enumerate())
        .map(|(i, h)| (h.name.as_str(), i))
        .collect();
    let mut seen = std::collections::HashSet::new();
    for h in hosts {
        if !known.contains_key(h.as_str()) {
            return Err(SpreadError::UnknownHost(h.clone()));
        }
        if !seen.insert(h.as_str()) {
            return Err(SpreadError::Duplicate(h.clone()));
        }
    }
    let needed = tasks.div_ceil(per_node) as usize;
    if needed > hosts.len() {
        return Err(SpreadError::TooFew {
            tasks,
            per_node,
            needed,
            available: hosts.len(),
        });
    }
    // Each given host under its first leaf (in the topology's order); hosts of no leaf
    // form a group of their own, used last.
    let mut leaf_of: HashMap<&str, &str> = HashMap::new();
    let leaves = t.leaves();
    for g in &leaves {
        for h in &g.hosts {
            leaf_of.entry(h.as_str()).or_insert(g.switch.as_str());
        }
    }
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for h in hosts {
        let leaf = leaf_of.get(h.as_str()).copied().unwrap_or("-");
        match groups.iter_mut().find(|(l, _)| *l == leaf) {
            Some((_, members)) => members.push(h),
            None => groups.push((leaf, vec![h])),
        }
    }
    // Fewest leaves: the fullest first (a stable sort keeps the topology's order among
    // equals); the hosts of no leaf after every leaf.
    groups.sort_by_key(|(leaf, members)| (*leaf == "-", std::cmp::Reverse(members.len())));
    let nodes = (groups.iter())
        .flat_map(|(leaf, members)| members.iter().map(move |h| (*h, *leaf)))
        .take(needed);
    let mut out = Vec::with_capacity(tasks as usize);
    for (host, leaf) in nodes {
        for _ in 0..per_node {
            if out.len() == tasks as usize {
                break;
            }
            out.push(TaskPlace {
                task: out.len() as u32,
                host: host.to_string(),
                leaf: leaf.to_string(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Leaves of 4, 2 and 3 hosts under a spine (n1-n4, n5-n6, n7-n9).
    fn fabric() -> Topology {
        super::super::read(
            "SwitchName=a Nodes=n[1-4]\nSwitchName=b Nodes=n[5-6]\nSwitchName=c Nodes=n[7-9]\nSwitchName=s Switches=a,b,c\n",
        )
        .expect("topology.conf")
    }

    fn hosts_of(places: &[TaskPlace]) -> Vec<&str> {
        places.iter().map(|p| p.host.as_str()).collect()
    }

    #[test]
    fn tasks_fill_the_fullest_leaves_in_blocks_per_node() {
        let t = fabric();
        let p = spread(&t, None, 6, 2).expect("placed");
        assert_eq!(hosts_of(&p), ["n1", "n1", "n2", "n2", "n3", "n3"]);
        assert!(p.iter().all(|x| x.leaf == "a"));
        // Five nodes: leaf a's four, then the fuller of the rest (c).
        let p = spread(&t, None, 5, 1).expect("placed");
        assert_eq!(hosts_of(&p), ["n1", "n2", "n3", "n4", "n7"]);
        // Of the job's nodes only: c has three of them, a two.
        let mine: Vec<String> = ["n2", "n4", "n7", "n8", "n9", "n5"]
            .map(String::from)
            .to_vec();
        let p = spread(&t, Some(&mine), 3, 1).expect("placed");
        assert_eq!(hosts_of(&p), ["n7", "n8", "n9"], "under one leaf");
        let p = spread(&t, Some(&mine), 7, 2).expect("placed");
        assert_eq!(
            hosts_of(&p),
            ["n7", "n7", "n8", "n8", "n9", "n9", "n2"],
            "then a's two"
        );
    }

    #[test]
    fn impossible_placements_say_why() {
        let t = fabric();
        assert_eq!(spread(&t, None, 0, 1), Err(SpreadError::Nothing));
        let e = spread(&t, None, 10, 1).expect_err("nine nodes");
        assert!(e.to_string().contains("need 10 nodes; 9 given"), "{e}");
        let bad = ["n1".to_string(), "x".to_string()];
        assert_eq!(
            spread(&t, Some(&bad), 1, 1),
            Err(SpreadError::UnknownHost("x".into()))
        );
        let e = spread(&t, None, u32::MAX, u32::MAX).expect_err("too many");
        assert_eq!(e, SpreadError::TooMany(u32::MAX));
        let twice = ["n1".to_string(), "n1".to_string()];
        assert_eq!(
            spread(&t, Some(&twice), 1, 1),
            Err(SpreadError::Duplicate("n1".into()))
        );
    }
}
