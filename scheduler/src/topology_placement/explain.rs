//! Why a group fits no domain, in one line whatever the number of domains.

use super::placing::Need;
use super::tree::{first_node, in_scope, innermost, key_resource, level_of, nodes_of};
use super::{Group, Miss, Place, Placing};
use crate::ids::PodId;
use crate::placement::Feasibility;
use crate::snapshot::{Level, Snapshot, Topology};

impl Placing<'_, '_, '_> {
    /// Why `miss`'s group fits no domain, in one line whatever the number of domains: the
    /// requirement, the best domain and how much of the group it holds, how many domains were
    /// checked, the nodes excluded and why, and whether the room is there but fragmented.
    pub fn explain(&mut self, miss: &Miss) -> String {
        let (g, scope) = (&miss.group, &miss.scope);
        let snap = self.ssn.snap;
        let topo = &snap.topologies[g.topology];
        let todo: Vec<PodId> = g.members.iter().copied().filter(|&p| self.waiting(p)).collect();
        if todo.is_empty() {
            return "its pods do not fit together".to_string();
        }
        let needs = self.needs(g, &todo);
        let level = g.required.unwrap_or(topo.node_level());
        let shape = self.shape(g.topology, level, &needs, scope);
        if let Some((version, Some(text))) = shape.as_ref().and_then(|s| self.placer.topology_misses.get(s)) {
            if *version == self.ssn.version {
                return text.clone();
            }
        }
        let text = self.describe(g, &needs, level, scope);
        if let Some(shape) = shape {
            self.placer.topology_misses.insert(shape, (self.ssn.version, Some(text.clone())));
        }
        text
    }

    pub(super) fn describe(&mut self, g: &Group, needs: &[Need], level: Level, scope: &[(usize, Place)]) -> String {
        let snap = self.ssn.snap;
        let topo = &snap.topologies[g.topology];
        let job = &snap.jobs[snap.pods[self.asked[0]].job];
        let class = self.class(needs);
        let r = key_resource(snap, class);
        let name = &topo.levels[level];
        let total: i64 = needs.iter().map(|n| n.pods).sum();
        let size = |n: &Need| snap.amount(r, job.tasks[n.task].requests[r]);
        let what = match needs {
            [one] => format!("{} pod(s) x {} {}", one.pods, size(one), snap.resources[r]),
            many => {
                let parts: Vec<String> = many.iter().map(|n| format!("{} x {}", n.pods, size(n))).collect();
                format!("{total} pods ({}) of {}", parts.join(", "), snap.resources[r])
            }
        };
        let smallest = needs.iter().map(|n| job.tasks[n.task].requests[r]).min().unwrap_or(0);
        let within = innermost(scope, g.topology);
        let checked = count_places(snap, topo, level, within, scope);
        let mut best: Option<(i64, i64, Place)> = None;
        let mut together = 0;
        for place in self.candidates(g.topology, level, needs, smallest.max(1), scope) {
            let counts = self.counts(g.topology, place, needs, scope);
            let fill: i64 = needs.iter().zip(&counts).map(|(n, &c)| c.min(n.pods)).sum();
            together += counts.iter().sum::<i64>();
            let room = self.room(g.topology, place, class);
            if best.is_none_or(|(f, rm, _)| (fill, room) > (f, rm)) {
                best = Some((fill, room, place));
            }
        }
        let pinned = level_of(topo, within) == level as isize && g.required == Some(level);
        let mut text = format!("needs {what} within one {name}");
        match best {
            Some((fill, _, place)) if fill > 0 => {
                let primary = needs.iter().max_by_key(|n| job.tasks[n.task].requests[r]).expect("needs are not empty");
                let req = &job.tasks[primary.task].requests;
                let nodes = nodes_of(snap, topo, place);
                let with_room = nodes.iter().filter(|&&n| primary.feasibility.ok(n) && self.slots(n, req) >= 1).count();
                let free = snap.amount(r, self.room(g.topology, place, class));
                let label = place_name(snap, topo, place);
                let there = if pinned { " (where its running pods are)" } else { "" };
                if fill >= total {
                    text += &format!(": {name} {label}{there} has room for all {total} by count, but its pods do not fit together on its nodes");
                } else {
                    text += &format!(
                        ": best {name} {label}{there} holds {fill} of {total} ({free} {} free, but only {with_room} node(s) have {} free)",
                        snap.resources[r],
                        size(primary)
                    );
                }
            }
            _ => text += &format!(": no {name} has room for one of its pods"),
        }
        text += &format!("; {checked} {name}(s) checked");
        if !pinned && checked > 1 && together >= total && best.is_some_and(|(f, _, _)| f < total) {
            text += &format!("; the room is there in total but fragmented across {name}s");
        }
        let excluded = self.placer.excluded(snap, &needs[0].feasibility, g.topology, level, within);
        if !excluded.is_empty() {
            text += &format!("; excluded: {excluded}");
        }
        text
    }
}

/// How many places of `level` lie within the scope.
pub(super) fn count_places(
    snap: &Snapshot,
    topo: &Topology,
    level: Level,
    within: Place,
    scope: &[(usize, Place)],
) -> usize {
    if level == topo.node_level() {
        return nodes_of(snap, topo, within).into_iter().filter(|&n| in_scope(snap, scope, n)).count();
    }
    (0..topo.domains[level].len())
        .filter(|&d| first_node(topo, Place::Domain(level, d)).is_some_and(|n| in_scope(snap, scope, n)))
        .count()
}

/// A place's name for people: its label path, or the node's name.
pub(super) fn place_name(snap: &Snapshot, topo: &Topology, place: Place) -> String {
    match place {
        Place::Root => "the cluster".to_string(),
        Place::Domain(level, d) => topo.domains[level][d].name.clone(),
        Place::Node(n) => snap.nodes[n].name.clone(),
    }
}

/// Nodes of a place excluded for a task, by reason, and those lacking the label of `level`:
/// `6 node(s) had untolerated taint {dedicated}, 2 node(s) without a rack label`.
pub(crate) fn excluded_nodes(
    snap: &Snapshot,
    feasibility: &Feasibility,
    t: usize,
    level: Level,
    within: Place,
) -> String {
    let topo = &snap.topologies[t];
    let mut counts: Vec<(usize, String)> = Vec::new();
    let mut unlabelled = 0;
    for n in nodes_of(snap, topo, within) {
        if let Some(reason) = feasibility.why_excluded(n) {
            match counts.iter_mut().find(|(_, r)| r == reason) {
                Some((c, _)) => *c += 1,
                None => counts.push((1, reason.to_string())),
            }
        } else if level < topo.node_level() && topo.domain_of(level, n).is_none() {
            unlabelled += 1;
        }
    }
    counts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut parts: Vec<String> = counts.into_iter().map(|(c, r)| format!("{c} {r}")).collect();
    if unlabelled > 0 {
        parts.push(format!("{unlabelled} node(s) without a {} label", topo.levels[level]));
    }
    parts.join(", ")
}
