//! The `drover` command line.
//!
//! Exit codes: 0 success; 1 `sim --check` found mismatches, or the scheduler or controllers
//! stopped on a fatal error; 2 bad input (arguments, scenario, config, kubeconfig); 3 the
//! named object does not exist; 4 the cluster could not be reached or refused the request.

mod cluster;
mod connect;
mod explain;
mod explain_forecast;
mod explain_group;
mod output;
mod queue_state;
mod queue_tree;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use drover_api::crd::queue::QueueOpenState;
use drover_scheduler::config::SchedulerConfig;
use drover_sim::{check, report, run, scenario};

/// Drover: gang scheduling, hierarchical fair share and preemption for batch and AI work.
#[derive(Parser)]
#[command(name = "drover", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the scheduler on a scenario file, without Kubernetes.
    Sim(SimArgs),
    /// Print Drover's CustomResourceDefinitions as YAML (for `kubectl apply -f -`).
    Crds,
    /// Print everything the cluster needs before the binaries can schedule (the CRDs and the
    /// charge guard) as YAML, for `kubectl apply --server-side -f -`.
    Manifests,
    /// Run the scheduler against the cluster of the kubeconfig (or in-cluster config).
    Scheduler(cluster::SchedulerArgs),
    /// Run the controllers (Jobs, queue tree, pod groups, queue status).
    Controllers(cluster::ControllerArgs),
    /// Say why a job, pod group or pod waits and what would let it start.
    Explain(ExplainArgs),
    /// Show the queue tree, or open or close a queue.
    Queue(QueueArgs),
}

/// Options of `drover explain`.
#[derive(clap::Args)]
struct ExplainArgs {
    #[command(subcommand)]
    what: ExplainWhat,
    #[command(flatten)]
    kube: connect::KubeArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = output::Format::Table, global = true)]
    output: output::Format,
    /// The scheduler's configuration file, as `drover scheduler --config` (default: the bundled
    /// config/scheduler.yaml).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// The `spec.schedulerName` of the scheduler's pods, as `drover scheduler --scheduler-name`.
    #[arg(long, default_value = drover_api::labels::SCHEDULER_NAME, global = true)]
    scheduler_name: String,
}

#[derive(Subcommand)]
enum ExplainWhat {
    /// A batch.drover.dev Job, as NAMESPACE/NAME (NAME alone: the `default` namespace).
    Job {
        /// NAMESPACE/NAME of the Job.
        target: String,
    },
    /// A PodGroup, as NAMESPACE/NAME (NAME alone: the `default` namespace).
    Pg {
        /// NAMESPACE/NAME of the PodGroup.
        target: String,
    },
    /// A pod, through the PodGroup it belongs to, as NAMESPACE/NAME (NAME alone: the `default`
    /// namespace).
    Pod {
        /// NAMESPACE/NAME of the pod.
        target: String,
    },
}

/// Options of `drover queue`.
#[derive(clap::Args)]
struct QueueArgs {
    #[command(subcommand)]
    action: QueueAction,
    #[command(flatten)]
    kube: connect::KubeArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = output::Format::Table, global = true)]
    output: output::Format,
}

#[derive(Subcommand)]
enum QueueAction {
    /// Every queue with allocated, deserved, fair share and limit per resource.
    Tree,
    /// Let the queue admit new pod groups again.
    Open {
        /// The Queue's name.
        name: String,
    },
    /// Stop the queue admitting new pod groups; what runs keeps running.
    Close {
        /// The Queue's name.
        name: String,
    },
}

#[derive(clap::Args)]
struct SimArgs {
    /// The scenario file (YAML).
    #[arg(required_unless_present = "trace", conflicts_with = "trace")]
    file: Option<PathBuf>,
    /// Trace mode: replay this job trace (CSV, the schema of traces/README.md) instead.
    #[arg(long, requires = "nodes")]
    trace: Option<PathBuf>,
    /// Trace mode: identical nodes in the cluster.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    nodes: Option<u32>,
    /// Trace mode: GPUs per node.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// Trace mode: CPUs per node (default: 12 per GPU, or the trace's largest pod if more).
    #[arg(long)]
    cpus_per_node: Option<u32>,
    /// Trace mode: a policy to replay (repeatable; default: all of them, side by side):
    /// fifo-strict, fifo-backfill, greedy, sjf, drover, drover-elastic.
    #[arg(long = "policy")]
    policies: Vec<String>,
    /// Trace mode: queues to hash users (or, without users, job ids) into, each deserving an
    /// equal part of the cluster (unless --queue-quota none).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    queues: u32,
    /// Trace mode: what each queue deserves: `equal` parts of the cluster, or `none` (the
    /// whole cluster shared by over-quota weight, 1 each).
    #[arg(long, value_enum, default_value_t = QueueQuotaArg::Equal)]
    queue_quota: QueueQuotaArg,
    /// Trace mode: turn on time-based fair share (the `fairshare` plugin's `timeBased`, with
    /// its defaults unless the configuration file sets them) in the `drover` configuration.
    #[arg(long)]
    time_based_fair_share: bool,
    /// Trace mode: whether each job declares its run time to the scheduler (as a pod's
    /// `activeDeadlineSeconds` would): `exact`ly the trace's duration, or `none` (then no
    /// policy but the sjf oracle knows a duration before the job ends).
    #[arg(long, value_enum, requires = "trace", default_value_t = DeclaredRuntimesArg::Exact)]
    declared_runtimes: DeclaredRuntimesArg,
    /// Trace mode: seconds between scheduling cycles.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i64).range(1..))]
    period: i64,
    /// Trace mode: group the nodes into racks of this many (in order; the last may be
    /// smaller) as the `default` topology: a job with more GPUs than a node that one rack can
    /// hold requires one rack. Also replays without topology and reports both side by side.
    #[arg(long, requires = "trace", value_parser = clap::value_parser!(u32).range(1..))]
    nodes_per_rack: Option<u32>,
    /// Trace mode, with --nodes-per-rack: group the racks into blocks of this many, a level
    /// above racks: a job too large for a rack but not for a block requires one block.
    #[arg(long, requires = "nodes_per_rack", value_parser = clap::value_parser!(u32).range(1..))]
    racks_per_block: Option<u32>,
    /// Trace mode: write SVG plots (GPU allocation over time, queueing-delay CDF and, with
    /// more than one queue, queue shares against fair shares) into this folder and name them
    /// on stderr.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Scheduling cycles to run (default: the scenario's `cycles`, else 1).
    #[arg(long)]
    cycles: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Compare the result with the scenario's `expect`; exit 1 on any mismatch.
    #[arg(long)]
    check: bool,
    /// Scheduler configuration file (default: the bundled config/scheduler.yaml); in trace
    /// mode, the configuration the `drover` policy runs.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// `--queue-quota`.
#[derive(Clone, Copy, ValueEnum)]
enum QueueQuotaArg {
    Equal,
    None,
}

impl From<QueueQuotaArg> for drover_sim::trace::replay::QueueQuota {
    fn from(q: QueueQuotaArg) -> Self {
        match q {
            QueueQuotaArg::Equal => Self::Equal,
            QueueQuotaArg::None => Self::None,
        }
    }
}

/// `--declared-runtimes`.
#[derive(Clone, Copy, ValueEnum)]
enum DeclaredRuntimesArg {
    Exact,
    None,
}

impl From<DeclaredRuntimesArg> for drover_sim::trace::replay::DeclaredRuntimes {
    fn from(d: DeclaredRuntimesArg) -> Self {
        match d {
            DeclaredRuntimesArg::Exact => Self::Exact,
            DeclaredRuntimesArg::None => Self::None,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Json,
    Table,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim(args) => sim(args),
        Command::Crds => {
            print!("{}", drover_api::crd::all_yaml());
            ExitCode::SUCCESS
        }
        Command::Manifests => {
            print!("{}", drover_api::crd::manifests_yaml());
            ExitCode::SUCCESS
        }
        Command::Scheduler(args) => serve(cluster::scheduler(args)),
        Command::Controllers(args) => serve(cluster::controllers(args)),
        Command::Explain(args) => user_command(explain(args)),
        Command::Queue(args) => user_command(queue(args)),
    }
}

/// Runs a user command to completion; its failure picks the exit code.
fn user_command(command: impl std::future::Future<Output = Result<(), connect::Failure>>) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    match runtime.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}

async fn explain(args: ExplainArgs) -> Result<(), connect::Failure> {
    let (kind, target) = match &args.what {
        ExplainWhat::Job { target } => ("job", target),
        ExplainWhat::Pg { target } => ("podgroup", target),
        ExplainWhat::Pod { target } => ("pod", target),
    };
    let (namespace, name) = explain::parse_target(kind, target)?;
    let config = scheduler_config(args.config.as_deref()).map_err(connect::Failure::BadInput)?;
    let client = connect::client(&args.kube).await?;
    let (ns, name, scheduler) = (namespace.as_str(), name.as_str(), args.scheduler_name.as_str());
    let explanation = match &args.what {
        ExplainWhat::Job { .. } => explain::fetch(&client, ns, name, &config, scheduler).await?,
        ExplainWhat::Pg { .. } => explain_group::fetch_group(&client, ns, name, &config, scheduler).await?,
        ExplainWhat::Pod { .. } => explain_group::fetch_pod(&client, ns, name, &config, scheduler).await?,
    };
    output::print(args.output, &explanation, explain::table);
    Ok(())
}

async fn queue(args: QueueArgs) -> Result<(), connect::Failure> {
    let client = connect::client(&args.kube).await?;
    let state = match &args.action {
        QueueAction::Tree => {
            let tree = queue_tree::build(&queue_tree::fetch(&client).await?);
            output::print(args.output, &tree, queue_tree::table);
            return Ok(());
        }
        QueueAction::Open { name } => (name, QueueOpenState::Open),
        QueueAction::Close { name } => (name, QueueOpenState::Closed),
    };
    let change = queue_state::set(&client, state.0, state.1).await?;
    output::print(args.output, &change, queue_state::table);
    Ok(())
}

/// Runs a long-lived process on a tokio runtime; exit code 1 on a fatal error.
fn serve(process: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    match runtime.block_on(process) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The scheduler configuration in `path`, or the bundled config/scheduler.yaml: what
/// `drover scheduler`, `drover sim` and `drover explain` run.
fn scheduler_config(path: Option<&std::path::Path>) -> Result<SchedulerConfig, String> {
    let Some(path) = path else { return Ok(SchedulerConfig::default()) };
    std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| SchedulerConfig::from_yaml(&t).map_err(|e| e.to_string()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn sim(args: SimArgs) -> ExitCode {
    let mut config = match scheduler_config(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(trace) = &args.trace {
        if args.time_based_fair_share {
            config.enable_time_based();
        }
        return trace_replay(&args, trace, config);
    }
    let file = args.file.clone().expect("clap requires a scenario file without --trace");
    let scenario = match scenario::load(&file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.cycles == Some(0) {
        eprintln!("error: --cycles must be at least 1");
        return ExitCode::from(2);
    }
    config.apply(&scenario.config);
    let cycles = args.cycles.unwrap_or(scenario.cycles);
    let result = match run::simulate(&scenario, &config, cycles) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let rep = match args.output {
        Output::Table if !args.check => report::summary(&scenario.name, &result),
        _ => report::report(&scenario.name, &result),
    };
    match args.output {
        Output::Json => {
            if let Err(e) = report::write_json(&rep, std::io::BufWriter::new(std::io::stdout().lock())) {
                eprintln!("error: cannot write the report: {e}");
                return ExitCode::from(1);
            }
        }
        Output::Table => print!("{}", report::to_table(&rep)),
    }
    let code = if args.check { check_expectations(&file, &scenario, &rep) } else { ExitCode::SUCCESS };
    // The process ends here: its memory goes back to the system at once, rather than freed
    // object by object (some 30 ms for a 10,000-node scenario).
    std::mem::forget((scenario, result, rep));
    code
}

/// `drover sim --check`: whether the report meets the scenario's `expect` block.
fn check_expectations(file: &std::path::Path, scenario: &scenario::Scenario, rep: &report::Report) -> ExitCode {
    let problems = check::mismatches(scenario, rep);
    if !problems.is_empty() {
        eprintln!("{}: {} expectation(s) not met:", file.display(), problems.len());
        for p in &problems {
            eprintln!("  {p}");
        }
        return ExitCode::from(1);
    }
    if scenario.expect.is_none() {
        eprintln!("{}: --check: the scenario has no `expect` block", file.display());
    }
    ExitCode::SUCCESS
}

/// `drover sim --trace`: replays a trace under each policy and prints them side by side.
fn trace_replay(args: &SimArgs, path: &std::path::Path, config: SchedulerConfig) -> ExitCode {
    use drover_sim::trace::{self, policy::Policy, racks::Racks, replay::Cluster, rows};
    let policies = if args.policies.is_empty() {
        trace::policy::ALL.to_vec()
    } else {
        match args.policies.iter().map(|p| Policy::parse(p)).collect::<Result<Vec<_>, _>>() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: --policy: {e}");
                return ExitCode::from(2);
            }
        }
    };
    let jobs = match rows::load(path) {
        Ok(jobs) => jobs,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cluster = Cluster {
        nodes: args.nodes.expect("clap requires --nodes with --trace"),
        gpus_per_node: args.gpus_per_node,
        cpus_per_node: args.cpus_per_node.unwrap_or_else(|| trace::default_cpus_per_node(&jobs, args.gpus_per_node)),
        queues: args.queues,
        quota: args.queue_quota.into(),
        period: args.period,
        config,
        racks: args.nodes_per_rack.map(|nodes_per_rack| Racks {
            nodes_per_rack,
            racks_per_block: args.racks_per_block,
            aware: true,
        }),
        declared_runtimes: args.declared_runtimes.into(),
    };
    let results = match trace::run(&jobs, &cluster, &policies) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    if let Some(dir) = &args.plots {
        match trace::plots(dir, &jobs, &cluster, &results) {
            // On stderr: stdout stays the report alone, the same bytes for the same input.
            Ok(paths) => paths.iter().for_each(|p| eprintln!("wrote plot {}", p.display())),
            Err(e) => {
                eprintln!("error: --plots: {e}");
                return ExitCode::from(1);
            }
        }
    }
    match args.output {
        Output::Json => print!("{}", trace::to_json(&cluster, &results)),
        Output::Table => print!("{}", trace::to_table(&cluster, &results)),
    }
    ExitCode::SUCCESS
}
