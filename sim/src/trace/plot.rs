//! SVG plots of a trace replay, one series per policy: GPUs allocated over time against the
//! cluster's capacity, the distribution (CDF) of GPU jobs' queueing delays, and, when there is
//! more than one queue, each queue's share of the GPUs against its fair share. Time axes are
//! labelled in the units people read (`30 min`, `2 h`, `3 d`) and end at the first tick at or
//! above the data.

use std::path::{Path, PathBuf};

use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::policy::Policy;
use super::replay::Replay;
use super::rows::TraceJob;

/// Colours of the policies' series, by position.
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

const MINUTE: f64 = 60.0;
const HOUR: f64 = 3600.0;
const DAY: f64 = 86400.0;

/// Steps of a linear time axis, in seconds, smallest first: each a round number of its unit.
const LINEAR_STEPS: [f64; 25] = [
    1.0,
    2.0,
    5.0,
    10.0,
    15.0,
    30.0,
    MINUTE,
    2.0 * MINUTE,
    5.0 * MINUTE,
    10.0 * MINUTE,
    15.0 * MINUTE,
    30.0 * MINUTE,
    HOUR,
    2.0 * HOUR,
    3.0 * HOUR,
    6.0 * HOUR,
    12.0 * HOUR,
    DAY,
    2.0 * DAY,
    5.0 * DAY,
    7.0 * DAY,
    14.0 * DAY,
    30.0 * DAY,
    90.0 * DAY,
    365.0 * DAY,
];

/// Most ticks a linear time axis gets.
const MAX_TICKS: f64 = 10.0;

/// Ticks of a logarithmic time axis, in seconds: the durations people name.
const LOG_TICKS: [f64; 11] =
    [1.0, 10.0, MINUTE, 10.0 * MINUTE, HOUR, 6.0 * HOUR, DAY, 7.0 * DAY, 30.0 * DAY, 90.0 * DAY, 365.0 * DAY];

type PlotResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Writes `allocation.svg`, `queue-delay-cdf.svg` and, when the replays have more than one
/// queue, `queue-shares.svg` into `dir`; returns the paths written.
pub fn write_all(
    dir: &Path,
    trace: &[TraceJob],
    total_gpus: u32,
    runs: &[(Policy, &Replay)],
) -> PlotResult<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = vec![dir.join("allocation.svg"), dir.join("queue-delay-cdf.svg")];
    allocation(&written[0], total_gpus, runs)?;
    delay_cdf(&written[1], trace, runs)?;
    if queue_count(runs) > 1 {
        written.push(dir.join("queue-shares.svg"));
        shares(&written[2], total_gpus, runs)?;
    }
    Ok(written)
}

/// Seconds as a tick label: `0`, `45 s`, `30 min`, `1.5 h`, `3 d`.
pub fn time_label(seconds: f64) -> String {
    let (value, unit) = match seconds.abs() {
        0.0 => return "0".into(),
        s if s < MINUTE => (seconds, "s"),
        s if s < HOUR => (seconds / MINUTE, "min"),
        s if s < DAY => (seconds / HOUR, "h"),
        _ => (seconds / DAY, "d"),
    };
    let text = format!("{value:.1}");
    format!("{} {unit}", text.strip_suffix(".0").unwrap_or(&text))
}

/// A linear time axis from 0 covering `end` seconds: its ticks, multiples of the smallest
/// round step that needs at most ten of them, up to the first at or above `end` (where the
/// axis ends).
pub fn linear_time_ticks(end: f64) -> Vec<f64> {
    let end = end.max(1.0);
    let step = LINEAR_STEPS.into_iter().find(|s| (end / s).ceil() <= MAX_TICKS).unwrap_or_else(|| {
        let year = 365.0 * DAY;
        (end / MAX_TICKS / year).ceil() * year
    });
    let count = (end / step).ceil() as u32;
    (0..=count).map(|k| f64::from(k) * step).collect()
}

/// A logarithmic time axis from 1 s covering `max` seconds: its ticks, the durations people
/// name, up to the first at or above `max` (where the axis ends).
pub fn log_time_ticks(max: f64) -> Vec<f64> {
    let last = LOG_TICKS.iter().position(|&t| t >= max).unwrap_or(LOG_TICKS.len() - 1).max(1);
    LOG_TICKS[..=last].to_vec()
}

/// A time axis in seconds (linear or logarithmic, as `inner` maps it) ticked at `ticks`.
struct TimeAxis<R> {
    inner: R,
    ticks: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Ranged for TimeAxis<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, _: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

/// Queues the replays hold figures for.
fn queue_count(runs: &[(Policy, &Replay)]) -> usize {
    let mut names: Vec<&String> = runs.iter().flat_map(|(_, r)| r.queue_shares.keys()).collect();
    names.sort_unstable();
    names.dedup();
    names.len()
}

fn allocation(path: &Path, total_gpus: u32, runs: &[(Policy, &Replay)]) -> PlotResult<()> {
    let end = runs.iter().filter_map(|(_, r)| r.allocation.last().map(|&(t, _)| t)).max().unwrap_or(1);
    let ticks = linear_time_ticks(end as f64);
    let axis_end = *ticks.last().expect("an axis has ticks");
    let capacity = f64::from(total_gpus);
    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("GPUs allocated over time", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            TimeAxis { inner: RangedCoordf64::from(0f64..axis_end), ticks },
            0f64..capacity.max(1.0) * 1.1,
        )?;
    chart
        .configure_mesh()
        .x_desc("time since the trace's start")
        .x_label_formatter(&|t| time_label(*t))
        .y_desc("GPUs allocated")
        .y_label_formatter(&|g| format!("{g:.0}"))
        .draw()?;
    chart
        .draw_series(DashedLineSeries::new([(0.0, capacity), (axis_end, capacity)], 8, 4, BLACK.stroke_width(2)))?
        .label(format!("cluster capacity: {total_gpus} GPUs"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(2)));
    for (i, (policy, run)) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points = Vec::with_capacity(run.allocation.len() * 2);
        for w in run.allocation.windows(2) {
            let (t0, g) = w[0];
            points.push((t0 as f64, f64::from(g)));
            points.push((w[1].0 as f64, f64::from(g)));
        }
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(1)))?
            .label(format!("{}: GPUs allocated", policy.name()))
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

fn delay_cdf(path: &Path, trace: &[TraceJob], runs: &[(Policy, &Replay)]) -> PlotResult<()> {
    let delays: Vec<Vec<f64>> = runs
        .iter()
        .map(|(_, run)| {
            let mut d: Vec<f64> = run
                .jobs
                .iter()
                .filter(|r| trace[r.job].gpus_per_pod > 0)
                .filter_map(|r| Some(r.queue_delay(trace[r.job].submit)?.max(1) as f64))
                .collect();
            d.sort_by(f64::total_cmp);
            d
        })
        .collect();
    let longest = delays.iter().filter_map(|d| d.last().copied()).fold(1.0, f64::max);
    let ticks = log_time_ticks(longest);
    let axis_end = *ticks.last().expect("an axis has ticks");
    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Queueing delay of GPU jobs (CDF)", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(TimeAxis { inner: LogCoord::from((1f64..axis_end).log_scale()), ticks }, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("time waiting (log scale; no wait is shown at 1 s)")
        .x_label_formatter(&|t| time_label(*t))
        .y_desc("fraction of GPU jobs")
        .draw()?;
    for (i, ((policy, _), delays)) in runs.iter().zip(&delays).enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let n = delays.len().max(1) as f64;
        let points = delays.iter().enumerate().map(|(k, &d)| (d, (k + 1) as f64 / n));
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(format!("{}: GPU jobs that waited at most x", policy.name()))
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

fn shares(path: &Path, total_gpus: u32, runs: &[(Policy, &Replay)]) -> PlotResult<()> {
    let queues: Vec<&String> = runs.first().map(|(_, r)| r.queue_shares.keys().collect()).unwrap_or_default();
    let fraction = |run: &Replay, x: f64| {
        let norm = run.contended as f64 * f64::from(total_gpus.max(1));
        if norm > 0.0 {
            x / norm
        } else {
            0.0
        }
    };
    let highest = runs
        .iter()
        .flat_map(|(_, r)| r.queue_shares.values().flat_map(|q| [fraction(r, q.allocated), fraction(r, q.fair)]))
        .fold(0.0, f64::max);
    let top = ((highest * 10.0).ceil() / 10.0).clamp(0.1, 1.0);
    let root = SVGBackend::new(path, (1000, 500)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = queues.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption("Each queue's share of the GPUs while work waits", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..top)?;
    chart
        .configure_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| queues.get(x.round() as usize).map_or(String::new(), |q| (*q).clone()))
        .x_desc("queue")
        .y_desc("fraction of the cluster's GPUs")
        .draw()?;
    for (i, (policy, run)) in runs.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let offset = (i as f64 - runs.len() as f64 / 2.0) * 0.08;
        let at = |k: usize| k as f64 + offset;
        let allocated: Vec<(f64, f64)> =
            run.queue_shares.values().enumerate().map(|(k, q)| (at(k), fraction(run, q.allocated))).collect();
        let fair: Vec<(f64, f64)> =
            run.queue_shares.values().enumerate().map(|(k, q)| (at(k), fraction(run, q.fair))).collect();
        chart
            .draw_series(allocated.into_iter().map(move |p| Circle::new(p, 4, colour.filled())))?
            .label(format!("{}: share allocated (dot)", policy.name()))
            .legend(move |(x, y)| Circle::new((x + 9, y), 4, colour.filled()));
        chart
            .draw_series(fair.into_iter().map(move |p| Cross::new(p, 5, colour)))?
            .label(format!("{}: fair share (cross)", policy.name()))
            .legend(move |(x, y)| Cross::new((x + 9, y), 5, colour));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_in_the_units_people_read() {
        let labels: Vec<String> =
            [0.0, 45.0, 90.0, 1800.0, 7200.0, 5400.0, 3.0 * DAY, 36.0 * HOUR].into_iter().map(time_label).collect();
        assert_eq!(labels, ["0", "45 s", "1.5 min", "30 min", "2 h", "1.5 h", "3 d", "1.5 d"]);
        assert_eq!(time_label(1_000_000.0), "11.6 d");
    }

    #[test]
    fn a_linear_time_axis_ends_at_the_first_round_tick_at_or_above_the_data() {
        // 2 h 40 min of data: ticks every 30 min, the axis ending at 3 h.
        let ticks = linear_time_ticks(9600.0);
        assert_eq!(ticks.first(), Some(&0.0));
        assert_eq!(ticks.last(), Some(&(3.0 * HOUR)));
        assert_eq!(ticks[1], 30.0 * MINUTE);
        // 60 days of data: weekly ticks up to 63 d, never more than ten steps.
        let ticks = linear_time_ticks(60.0 * DAY);
        assert_eq!((ticks[1], ticks.last().copied()), (7.0 * DAY, Some(63.0 * DAY)));
        assert!(ticks.len() <= 11);
        // Exactly on a tick: the axis ends there.
        assert_eq!(linear_time_ticks(2.0 * HOUR).last(), Some(&(2.0 * HOUR)));
    }

    #[test]
    fn a_log_time_axis_ends_at_the_named_duration_just_above_the_longest_wait() {
        // The longest wait is 1.4 h: the axis ends at 6 h, not two decades later.
        assert_eq!(log_time_ticks(5000.0), [1.0, 10.0, MINUTE, 10.0 * MINUTE, HOUR, 6.0 * HOUR]);
        assert_eq!(log_time_ticks(DAY).last(), Some(&DAY));
        // No wait at all still spans 1 s to 10 s.
        assert_eq!(log_time_ticks(1.0), [1.0, 10.0]);
        let labels: Vec<String> = log_time_ticks(40.0 * DAY).into_iter().map(time_label).collect();
        assert_eq!(labels, ["1 s", "10 s", "1 min", "10 min", "1 h", "6 h", "1 d", "7 d", "30 d", "90 d"]);
    }
}
