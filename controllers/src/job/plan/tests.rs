//! The planner's decisions, case by case, without a cluster.

use super::*;
use drover_api::crd::job::{JobSpec, TaskSpec};

fn job(replicas: u32) -> Job {
    let task = TaskSpec { name: "w".into(), replicas, ..TaskSpec::default() };
    let mut j = Job::new("big", JobSpec { tasks: vec![task], max_retry: 3, ..JobSpec::default() });
    j.metadata.namespace = Some("ns".into());
    j
}

fn pending(job: &str, index: u32) -> PodView {
    PodView {
        name: pod_name(job, "w", index),
        uid: format!("u{index}"),
        task: "w".into(),
        index: Some(index),
        retry: 0,
        world_size: None,
        phase: Phase::Pending,
        deleting: false,
    }
}

#[test]
fn a_huge_job_plans_one_batch_of_pods_and_comes_back_at_once() {
    for replicas in [BATCH as u32 + 1, u32::MAX] {
        let planned = plan(&job(replicas), &[], &[], Ok(()), None, jiff::Timestamp::now());
        assert_eq!(planned.create.len(), BATCH, "{replicas} replicas");
        assert_eq!(planned.create.last(), Some(&(0, BATCH as u32 - 1)));
        assert_eq!(planned.requeue, Some(Duration::ZERO));
    }
}

#[test]
fn the_next_batch_starts_after_the_pods_that_exist() {
    let pods: Vec<PodView> = (0..BATCH as u32).map(|i| pending("big", i)).collect();
    let planned = plan(&job(2 * BATCH as u32 + 7), &pods, &[], Ok(()), None, jiff::Timestamp::now());
    assert_eq!(planned.create.first(), Some(&(0, BATCH as u32)));
    assert_eq!(planned.create.len(), BATCH);
    let last = plan(&job(BATCH as u32 + 7), &pods, &[], Ok(()), None, jiff::Timestamp::now());
    assert_eq!(last.create.len(), 7);
    assert_eq!(last.requeue, None, "nothing left for another batch");
}

#[test]
fn the_status_shows_the_gang_minimum_in_force_and_mirrors_why_the_group_waits() {
    let mut gang = job(4);
    assert_eq!(plan(&gang, &[], &[], Ok(()), None, jiff::Timestamp::now()).status.min_available, 4, "all replicas");
    gang.spec.min_available = Some(2);
    let planned = plan(&gang, &[], &[], Ok(()), None, jiff::Timestamp::now());
    assert_eq!(planned.status.min_available, 2);
    let mut group = PodGroupStatus::default();
    assert_eq!(reason(&planned.status, Some(&group)), None, "a group that does not wait gives no reason");
    let now = jiff::Timestamp::now();
    conditions::set(&mut group.conditions, "Unschedulable", true, "Unschedulable", "queue full", now, None);
    assert_eq!(reason(&planned.status, Some(&group)).as_deref(), Some("queue full"));
    let refused = plan(&gang, &[], &[], Err(("QueueNotFound".into(), "no queue q".into())), None, now);
    assert_eq!(reason(&refused.status, Some(&group)).as_deref(), Some("no queue q"), "Valid=False comes first");
    let mut done = planned.status.clone();
    done.state = JobState::Completed;
    assert_eq!(reason(&done, Some(&group)), None, "a finished job waits for nothing");
}

#[test]
fn the_status_mirrors_the_groups_forecast_until_the_job_finishes() {
    let planned = plan(&job(4), &[], &[], Ok(()), None, jiff::Timestamp::now());
    let shown = Forecast { queue_position: 1, position: 3, ..Forecast::default() };
    let group = PodGroupStatus { forecast: Some(shown.clone()), ..PodGroupStatus::default() };
    assert_eq!(forecast(&planned.status, Some(&group)), Some(shown));
    assert_eq!(forecast(&planned.status, Some(&PodGroupStatus::default())), None, "a group that runs");
    assert_eq!(forecast(&planned.status, None), None, "no group yet");
    let done = JobStatus { state: JobState::Completed, ..planned.status };
    assert_eq!(forecast(&done, Some(&group)), None, "a finished job waits for nothing");
}

#[test]
fn scaling_down_deletes_one_batch_at_a_time() {
    let pods: Vec<PodView> = (0..2 * BATCH as u32).map(|i| pending("big", i)).collect();
    let planned = plan(&job(1), &pods, &[], Ok(()), None, jiff::Timestamp::now());
    assert_eq!(planned.delete.len(), BATCH);
    assert!(planned.delete.iter().all(|d| d.name != "big-w-0"), "the pod in the spec stays");
    assert_eq!(planned.requeue, Some(Duration::ZERO));
}

fn sizing(current: u32, target: u32) -> Sizing {
    Sizing { floor: 1, ceiling: 16, current, target, why: "no room for 16".into() }
}

#[test]
fn a_resize_restarts_every_pod_without_spending_a_retry_then_makes_the_new_size() {
    let made_for = |size: u32| -> Vec<PodView> {
        (0..size).map(|i| PodView { world_size: Some(size), ..pending("big", i) }).collect()
    };
    let mut old = job(16);
    old.status = Some(JobStatus { replicas: Some(16), ..JobStatus::default() });
    let sized = super::super::elastic::at_size(&old, 4);
    let begun = plan(&sized, &made_for(16), &[], Ok(()), Some(&sizing(16, 4)), jiff::Timestamp::now());
    assert_eq!(begun.status.state, JobState::Restarting);
    assert_eq!(begun.delete.len(), 16, "every pod read WORLD_SIZE=16 at start");
    assert!(begun.create.is_empty(), "the old pods go first: the new ones take their names");
    assert_eq!((begun.status.retry_count, begun.status.replicas), (0, Some(16)), "no retry; still 16 pods");
    let note = begun.notes.iter().find(|n| n.reason == "Resized").expect("an Event says why");
    assert!(note.message.contains("from 16 to 4 pods: no room for 16"), "{}", note.message);

    let mut restarting = sized.clone();
    restarting.status = Some(begun.status.clone());
    let deleting: Vec<PodView> = made_for(16).into_iter().map(|p| PodView { deleting: true, ..p }).collect();
    let waits = plan(&restarting, &deleting, &[], Ok(()), Some(&sizing(16, 4)), jiff::Timestamp::now());
    assert_eq!((waits.status.state, waits.create.len()), (JobState::Restarting, 0), "old pods still there");
    let done = plan(&restarting, &[], &[], Ok(()), Some(&sizing(16, 4)), jiff::Timestamp::now());
    assert_eq!((done.status.state, done.status.replicas), (JobState::Pending, Some(4)));
    assert_eq!(done.create, (0..4).map(|i| (0, i)).collect::<Vec<_>>());
}

#[test]
fn an_elastic_job_at_its_size_is_left_alone() {
    let made: Vec<PodView> = (0..4).map(|i| PodView { world_size: Some(4), ..pending("big", i) }).collect();
    let mut at_four = job(4);
    at_four.status = Some(JobStatus { replicas: Some(4), ..JobStatus::default() });
    let planned = plan(&at_four, &made, &[], Ok(()), Some(&sizing(4, 4)), jiff::Timestamp::now());
    assert!(planned.delete.is_empty() && planned.create.is_empty());
    assert_eq!((planned.status.state, planned.status.replicas), (JobState::Pending, Some(4)));
}
