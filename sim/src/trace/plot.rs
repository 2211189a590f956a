//! SVG plots of a trace replay, one series per policy: GPUs allocated over time, the
//! distribution (CDF) of GPU jobs' queueing delays, and each queue's share of the GPUs against
//! its fair share.

use std::path::Path;

use plotters::prelude::*;

use super::policy::Policy;
use super::replay::Replay;
use super::rows::TraceJob;

/// Colours of the policies' series, by position.
const COLOURS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

type PlotResult = Result<(), Box<dyn std::error::Error>>;

/// Writes `allocation.svg`, `queue-delay-cdf.svg` and `queue-shares.svg` into `dir`.
pub fn write_all(dir: &Path, trace: &[TraceJob], total_gpus: u32, runs: &[(Policy, &Replay)]) -> PlotResult {
    std::fs::create_dir_all(dir)?;
    allocation(&dir.join("allocation.svg"), total_gpus, runs)?;
    delay_cdf(&dir.join("queue-delay-cdf.svg"), trace, runs)?;
    shares(&dir.join("queue-shares.svg"), total_gpus, runs)?;
    Ok(())
}

fn allocation(path: &Path, total_gpus: u32, runs: &[(Policy, &Replay)]) -> PlotResult {
    let end = runs.iter().filter_map(|(_, r)| r.allocation.last().map(|&(t, _)| t)).max().unwrap_or(1).max(1);
    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("GPUs allocated over time", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end as f64 / 86400.0, 0f64..f64::from(total_gpus) * 1.05)?;
    chart.configure_mesh().x_desc("days").y_desc("GPUs allocated").draw()?;
    for (i, (policy, run)) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points = Vec::with_capacity(run.allocation.len() * 2);
        for w in run.allocation.windows(2) {
            let (t0, g) = w[0];
            let t1 = w[1].0;
            points.push((t0 as f64 / 86400.0, f64::from(g)));
            points.push((t1 as f64 / 86400.0, f64::from(g)));
        }
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(1)))?
            .label(policy.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

fn delay_cdf(path: &Path, trace: &[TraceJob], runs: &[(Policy, &Replay)]) -> PlotResult {
    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Queueing delay of GPU jobs (CDF)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1f64..1e7f64).log_scale(), 0f64..1f64)?;
    chart.configure_mesh().x_desc("seconds waiting (log scale; 0 shown as 1)").y_desc("fraction of jobs").draw()?;
    for (i, (policy, run)) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut delays: Vec<f64> = run
            .jobs
            .iter()
            .filter(|r| trace[r.job].gpus_per_pod > 0)
            .filter_map(|r| {
                let job = &trace[r.job];
                Some((r.finish? - job.submit - job.duration).max(1) as f64)
            })
            .collect();
        delays.sort_by(f64::total_cmp);
        let n = delays.len().max(1) as f64;
        let points = delays.iter().enumerate().map(|(k, &d)| (d, (k + 1) as f64 / n));
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(policy.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn shares(path: &Path, total_gpus: u32, runs: &[(Policy, &Replay)]) -> PlotResult {
    let queues: Vec<&String> = runs.first().map(|(_, r)| r.queue_shares.keys().collect()).unwrap_or_default();
    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = queues.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption("Share of GPUs while work waits: allocated (dots) vs fair share (crosses)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| queues.get(x.round() as usize).map_or(String::new(), |q| (*q).clone()))
        .y_desc("fraction of the cluster's GPUs")
        .draw()?;
    for (i, (policy, run)) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let norm = run.contended as f64 * f64::from(total_gpus.max(1));
        let offset = (i as f64 - runs.len() as f64 / 2.0) * 0.08;
        let at = |k: usize| k as f64 + offset;
        let of = |x: f64| if norm > 0.0 { x / norm } else { 0.0 };
        let allocated: Vec<(f64, f64)> =
            run.queue_shares.values().enumerate().map(|(k, q)| (at(k), of(q.allocated))).collect();
        let fair: Vec<(f64, f64)> = run.queue_shares.values().enumerate().map(|(k, q)| (at(k), of(q.fair))).collect();
        chart
            .draw_series(allocated.into_iter().map(move |p| Circle::new(p, 4, colour.filled())))?
            .label(policy.name())
            .legend(move |(x, y)| Circle::new((x + 9, y), 4, colour.filled()));
        chart.draw_series(fair.into_iter().map(move |p| Cross::new(p, 5, colour)))?;
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}
