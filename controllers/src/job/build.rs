//! The desired children of a Job, as pure functions of its spec: pods, the PodGroup and the
//! headless Service. No I/O here.

use std::collections::BTreeMap;

use drover_api::crd::elasticity::GroupElasticity;
use drover_api::crd::job::{Job, TaskSpec};
use drover_api::crd::podgroup::{PodGroup, PodGroupSpec};
use drover_api::{format_amount, ResourceList};
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use super::{
    DEFAULT_MASTER_PORT, JOB_NAME_LABEL, POD_GROUP_ANNOTATION, RETRY_ANNOTATION, SCHEDULER_NAME, TASK_INDEX_LABEL,
    TASK_LABEL, WORLD_SIZE_ANNOTATION,
};

/// The name of pod `index` of `task` in `job`.
pub fn pod_name(job: &str, task: &str, index: u32) -> String {
    format!("{job}-{task}-{index}")
}

/// The DNS name of a job's pod through the job's headless Service.
pub fn pod_host(job: &str, namespace: &str, pod: &str) -> String {
    format!("{pod}.{job}.{namespace}.svc")
}

/// The environment variable listing a task's hosts: `DROVER_HOSTS_<TASK>`.
pub fn hosts_var(task: &str) -> String {
    format!("DROVER_HOSTS_{}", task.to_ascii_uppercase().replace('-', "_"))
}

/// Total replicas of all tasks (saturating: a Job above `MAX_PODS` is refused before its
/// total is used).
pub fn total_replicas(job: &Job) -> u32 {
    job.spec.tasks.iter().fold(0, |sum, t| sum.saturating_add(t.replicas))
}

/// The gang minimum: `minAvailable`, else all replicas (never more than all replicas).
pub fn min_available(job: &Job) -> u32 {
    let total = total_replicas(job);
    job.spec.min_available.map_or(total, |m| m.min(total))
}

/// The controller owner reference children carry.
pub fn owner_ref(job: &Job) -> OwnerReference {
    let mut r = job.controller_owner_ref(&()).unwrap_or_else(|| OwnerReference {
        api_version: Job::api_version(&()).into_owned(),
        kind: Job::kind(&()).into_owned(),
        name: job.name_any(),
        uid: String::new(),
        controller: Some(true),
        block_owner_deletion: None,
    });
    r.block_owner_deletion = Some(true);
    r
}

fn namespace(job: &Job) -> String {
    job.namespace().unwrap_or_else(|| "default".into())
}

/// The PodGroup a job's pods belong to, in `queue`: the job's own, or the one the controller
/// chose for a job that names none; `elasticity` for an elastic job (`job` then at its size).
pub fn pod_group(job: &Job, queue: &str, elasticity: Option<GroupElasticity>) -> PodGroup {
    let name = job.name_any();
    let min_task_member: BTreeMap<String, u32> =
        job.spec.tasks.iter().filter_map(|t| t.min_available.map(|m| (t.name.clone(), m.min(t.replicas)))).collect();
    let mut pg = PodGroup::new(
        &name,
        PodGroupSpec {
            min_member: min_available(job).max(1),
            min_task_member,
            min_resources: min_resources(job),
            queue: Some(queue.to_string()),
            priority_class_name: job.spec.priority_class_name.clone(),
            schedule_timeout_seconds: None,
            topology: job.spec.topology.clone(),
            task_topology: job.spec.tasks.iter().filter_map(|t| Some((t.name.clone(), t.topology.clone()?))).collect(),
            elasticity,
        },
    );
    pg.metadata.namespace = job.namespace();
    pg.metadata.labels = Some([(JOB_NAME_LABEL.to_string(), name)].into());
    pg.metadata.owner_references = Some(vec![owner_ref(job)]);
    pg
}

/// The pods making up the gang minimum, as (task, count): first each task's own minimum, then
/// further pods in task order until the job's minimum is reached (as Volcano counts it).
fn minimum_pods(job: &Job) -> Vec<(&TaskSpec, u32)> {
    let mut left = min_available(job);
    let mut counts: Vec<u32> = job.spec.tasks.iter().map(|t| t.min_available.unwrap_or(0).min(t.replicas)).collect();
    left = left.saturating_sub(counts.iter().sum());
    for (t, c) in job.spec.tasks.iter().zip(counts.iter_mut()) {
        let more = (t.replicas - *c).min(left);
        *c += more;
        left -= more;
    }
    job.spec.tasks.iter().zip(counts).collect()
}

/// Sum of the requests of the minimum's pods, or `None` if nothing is requested or a request
/// does not parse (the scheduler then counts the pods themselves).
pub fn min_resources(job: &Job) -> Option<BTreeMap<String, Quantity>> {
    let mut sum: BTreeMap<String, i64> = BTreeMap::new();
    for (task, count) in minimum_pods(job) {
        let Some(spec) = task.template.get().ok().and_then(|t| t.spec.as_ref()) else { continue };
        for c in &spec.containers {
            for (name, q) in c.resources.as_ref().and_then(|r| r.requests.as_ref()).into_iter().flatten() {
                let amount = ResourceList::parse_amount(name, &q.0).ok()?;
                *sum.entry(name.clone()).or_default() += amount.checked_mul(i64::from(count))?;
            }
        }
    }
    if sum.is_empty() {
        return None;
    }
    Some(sum.into_iter().map(|(k, v)| (k.clone(), Quantity(format_amount(&k, v)))).collect())
}

/// The headless Service giving every pod a DNS name `<pod>.<job>.<ns>.svc`.
pub fn service(job: &Job) -> Service {
    let name = job.name_any();
    Service {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: job.namespace(),
            labels: Some([(JOB_NAME_LABEL.to_string(), name.clone())].into()),
            owner_references: Some(vec![owner_ref(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some([(JOB_NAME_LABEL.to_string(), name)].into()),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The most bytes the `DROVER_HOSTS_<TASK>` variables of a pod may take together. Linux refuses
/// to start a process with a single environment string above 128 KiB, and every byte is
/// stored in every pod: a Job whose host lists would be longer (over a thousand pods with
/// typical names) gets none, and its pods find each other by their names
/// (`<job>-<task>-<index>.<job>.<namespace>.svc`).
pub const HOSTS_ENV_BUDGET: usize = 64 * 1024;

/// The distributed-training environment shared by every pod of a job, computed once per
/// reconcile.
pub struct JobEnv {
    world_size: u32,
    master_addr: String,
    master_port: i32,
    hosts: Vec<(String, String)>,
}

impl JobEnv {
    /// The environment of `job`'s pods.
    pub fn of(job: &Job) -> JobEnv {
        let name = job.name_any();
        let ns = namespace(job);
        let first = job.spec.tasks.iter().find(|t| t.replicas > 0).or(job.spec.tasks.first());
        let master_addr = first.map(|t| pod_host(&name, &ns, &pod_name(&name, &t.name, 0))).unwrap_or_default();
        let master_port = first
            .and_then(|t| t.template.get().ok()?.spec.as_ref())
            .and_then(|s| s.containers.iter().find_map(|c| c.ports.as_ref()?.first().map(|p| p.container_port)))
            .unwrap_or(DEFAULT_MASTER_PORT);
        JobEnv { world_size: total_replicas(job), master_addr, master_port, hosts: host_lists(job, &name, &ns) }
    }
}

/// `DROVER_HOSTS_<TASK>` for every task, or none when they would exceed [`HOSTS_ENV_BUDGET`]
/// (building stops there, so a large Job costs no more than the budget).
fn host_lists(job: &Job, name: &str, ns: &str) -> Vec<(String, String)> {
    let mut used = 0;
    let mut lists = Vec::with_capacity(job.spec.tasks.len());
    for t in &job.spec.tasks {
        let mut list = String::new();
        for i in 0..t.replicas {
            if i > 0 {
                list.push(',');
            }
            list.push_str(&pod_host(name, ns, &pod_name(name, &t.name, i)));
            if used + list.len() > HOSTS_ENV_BUDGET {
                return Vec::new();
            }
        }
        used += list.len();
        lists.push((hosts_var(&t.name), list));
    }
    lists
}

fn add_env(container: &mut Container, vars: &[(String, String)]) {
    let env = container.env.get_or_insert_with(Vec::new);
    for (k, v) in vars {
        // A variable the template sets itself is the user's choice and is kept.
        if !env.iter().any(|e| &e.name == k) {
            env.push(EnvVar { name: k.clone(), value: Some(v.clone()), value_from: None });
        }
    }
}

/// Pod `index` of task number `task_pos` of `job` (whose environment is `env`), created at
/// retry `retry`.
pub fn pod(job: &Job, env: &JobEnv, task_pos: usize, index: u32, retry: u32) -> Pod {
    let task = &job.spec.tasks[task_pos];
    let job_name = job.name_any();
    let name = pod_name(&job_name, &task.name, index);
    let rank = job.spec.tasks[..task_pos].iter().fold(index, |sum, t| sum.saturating_add(t.replicas));

    let template = task.template.get().cloned().unwrap_or_default();
    let template_meta = template.metadata.unwrap_or_default();
    let mut labels = template_meta.labels.unwrap_or_default();
    labels.insert(JOB_NAME_LABEL.into(), job_name.clone());
    labels.insert(TASK_LABEL.into(), task.name.clone());
    labels.insert(TASK_INDEX_LABEL.into(), index.to_string());
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(POD_GROUP_ANNOTATION.into(), job_name.clone());
    annotations.insert(RETRY_ANNOTATION.into(), retry.to_string());
    annotations.insert(WORLD_SIZE_ANNOTATION.into(), env.world_size.to_string());

    let mut spec: PodSpec = template.spec.unwrap_or_default();
    if spec.scheduler_name.as_deref().is_none_or(str::is_empty) {
        spec.scheduler_name = Some(SCHEDULER_NAME.into());
    }
    if let Some(pc) = &job.spec.priority_class_name {
        spec.priority_class_name = Some(pc.clone());
    }
    spec.hostname = Some(name.clone());
    spec.subdomain = Some(job_name.clone());

    let mut vars = vec![
        ("DROVER_JOB_NAME".to_string(), job_name.clone()),
        ("DROVER_TASK_NAME".to_string(), task.name.clone()),
        ("DROVER_TASK_INDEX".to_string(), index.to_string()),
        ("RANK".to_string(), rank.to_string()),
        ("WORLD_SIZE".to_string(), env.world_size.to_string()),
        ("MASTER_ADDR".to_string(), env.master_addr.clone()),
        ("MASTER_PORT".to_string(), env.master_port.to_string()),
    ];
    vars.extend(env.hosts.iter().cloned());
    for c in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
        add_env(c, &vars);
    }

    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: job.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner_ref(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_api::crd::job::JobSpec;
    use drover_api::crd::task_template::TaskTemplate;
    use drover_api::crd::topology::{SliceConstraint, TaskTopologyConstraint, TopologyConstraint};
    use k8s_openapi::api::core::v1::{ContainerPort, PodTemplateSpec, ResourceRequirements};

    fn task(name: &str, replicas: u32, min: Option<u32>, cpu: &str) -> TaskSpec {
        TaskSpec {
            name: name.into(),
            replicas,
            min_available: min,
            template: TaskTemplate::from(PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "c".into(),
                        image: Some("busybox".into()),
                        resources: Some(ResourceRequirements {
                            requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            }),
            policies: vec![],
            topology: None,
        }
    }

    fn job(tasks: Vec<TaskSpec>, min: Option<u32>) -> Job {
        let mut j = Job::new("train", JobSpec { tasks, min_available: min, max_retry: 3, ..Default::default() });
        j.metadata.namespace = Some("ns".into());
        j.metadata.uid = Some("u1".into());
        j
    }

    fn pod_spec_mut(j: &mut Job, task: usize) -> &mut PodSpec {
        match &mut j.spec.tasks[task].template {
            TaskTemplate::Valid(t) => t.spec.as_mut().unwrap(),
            TaskTemplate::Unreadable { error, .. } => panic!("{error}"),
        }
    }

    fn env_of(p: &Pod) -> BTreeMap<String, String> {
        p.spec.as_ref().unwrap().containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn min_resources_take_task_minimums_first_then_task_order() {
        let j = job(vec![task("ps", 2, None, "1"), task("worker", 4, Some(2), "500m")], Some(3));
        // worker's own 2 (1000m), then 1 ps pod (1000m).
        let r = min_resources(&j).unwrap();
        assert_eq!(r["cpu"].0, "2");
        let pg = pod_group(&j, "default", None);
        assert_eq!(pg.spec.min_member, 3);
        assert_eq!(pg.spec.min_task_member, [("worker".to_string(), 2)].into());
    }

    #[test]
    fn the_job_topology_blocks_are_copied_into_its_pod_group() {
        let mut j = job(vec![task("ps", 1, None, "1"), task("worker", 16, None, "1")], None);
        let whole = TopologyConstraint { name: Some("fabric".into()), required: Some("block".into()), preferred: None };
        let sub = TaskTopologyConstraint {
            required: Some("rack".into()),
            preferred: None,
            slices: Some(SliceConstraint { size: 4, required: "nvlink".into() }),
        };
        j.spec.topology = Some(whole.clone());
        j.spec.tasks[1].topology = Some(sub.clone());
        let pg = pod_group(&j, "default", None);
        assert_eq!(pg.spec.topology, Some(whole));
        assert_eq!(pg.spec.task_topology, [("worker".to_string(), sub)].into());
    }

    #[test]
    fn env_has_rank_world_size_master_and_hosts() {
        let mut j = job(vec![task("master", 1, None, "1"), task("my-worker", 2, None, "1")], None);
        pod_spec_mut(&mut j, 0).containers[0].ports =
            Some(vec![ContainerPort { container_port: 1234, ..Default::default() }]);
        let p = pod(&j, &JobEnv::of(&j), 1, 1, 0);
        let env = env_of(&p);
        assert_eq!(env["RANK"], "2");
        assert_eq!(env["WORLD_SIZE"], "3");
        assert_eq!(env["MASTER_ADDR"], "train-master-0.train.ns.svc");
        assert_eq!(env["MASTER_PORT"], "1234");
        assert_eq!(env["DROVER_HOSTS_MY_WORKER"], "train-my-worker-0.train.ns.svc,train-my-worker-1.train.ns.svc");
        assert_eq!(p.spec.as_ref().unwrap().scheduler_name.as_deref(), Some("drover"));
        assert_eq!(p.spec.as_ref().unwrap().hostname.as_deref(), Some("train-my-worker-1"));
        pod_spec_mut(&mut j, 1).scheduler_name = Some("other".into());
        assert_eq!(
            pod(&j, &JobEnv::of(&j), 1, 0, 0).spec.unwrap().scheduler_name.as_deref(),
            Some("other"),
            "the template's is kept"
        );
    }

    #[test]
    fn host_lists_are_left_out_when_they_exceed_the_budget() {
        let small = job(vec![task("worker", 3, None, "1")], None);
        assert_eq!(env_of(&pod(&small, &JobEnv::of(&small), 0, 0, 0))["DROVER_HOSTS_WORKER"].split(',').count(), 3);
        // ~30 bytes per host ("train-worker-1234.train.ns.svc,"): 10,000 hosts are far above it.
        let large = job(vec![task("ps", 1, None, "1"), task("worker", 10_000, None, "1")], None);
        let env = env_of(&pod(&large, &JobEnv::of(&large), 1, 9_999, 0));
        assert!(!env.keys().any(|k| k.starts_with("DROVER_HOSTS_")), "{:?}", env.keys());
        assert_eq!(env["WORLD_SIZE"], "10001");
        assert_eq!(env["RANK"], "10000");
        let total: usize = JobEnv::of(&small).hosts.iter().map(|(_, v)| v.len()).sum();
        assert!(total <= HOSTS_ENV_BUDGET);
    }
}
