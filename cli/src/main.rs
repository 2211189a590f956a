//! The `drover` command line.
//!
//! Exit codes: 0 success, 1 `--check` found mismatches, 2 bad input (scenario or config).

mod cluster;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
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
    /// Run the scheduler against the cluster of the kubeconfig (or in-cluster config).
    Scheduler(cluster::SchedulerArgs),
    /// Run the controllers (Jobs, queue tree, pod groups, queue status).
    Controllers(cluster::ControllerArgs),
}

#[derive(clap::Args)]
struct SimArgs {
    /// The scenario file (YAML).
    file: PathBuf,
    /// Scheduling cycles to run (default: the scenario's `cycles`, else 1).
    #[arg(long)]
    cycles: Option<u32>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Compare the result with the scenario's `expect`; exit 1 on any mismatch.
    #[arg(long)]
    check: bool,
    /// Scheduler configuration file (default: the bundled config/scheduler.yaml).
    #[arg(long)]
    config: Option<PathBuf>,
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
        Command::Scheduler(args) => serve(cluster::scheduler(args)),
        Command::Controllers(args) => serve(cluster::controllers(args)),
    }
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

fn sim(args: SimArgs) -> ExitCode {
    let mut config = match &args.config {
        None => SchedulerConfig::default(),
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| SchedulerConfig::from_yaml(&t).map_err(|e| e.to_string()))
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
    };
    let scenario = match scenario::load(&args.file) {
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
            eprintln!("error: {}: {e}", args.file.display());
            return ExitCode::from(2);
        }
    };
    let rep = report::report(&scenario.name, &result);
    match args.output {
        Output::Json => print!("{}", report::to_json(&rep)),
        Output::Table => print!("{}", report::to_table(&rep)),
    }
    if args.check {
        let problems = check::mismatches(&scenario, &rep);
        if !problems.is_empty() {
            eprintln!("{}: {} expectation(s) not met:", args.file.display(), problems.len());
            for p in &problems {
                eprintln!("  {p}");
            }
            return ExitCode::from(1);
        }
        if scenario.expect.is_none() {
            eprintln!("{}: --check: the scenario has no `expect` block", args.file.display());
        }
    }
    ExitCode::SUCCESS
}
