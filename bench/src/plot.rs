//! The offered-load scenario's picture: end-to-end latency per second
//! above; below, the jobs waiting (left axis) and the busy slots (right
//! axis, up to the slots there are), on one time axis.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One second of an offered-load run.
pub struct Second {
    /// Seconds since the first scheduled submit.
    pub at: f64,
    /// End-to-end latency of the jobs scheduled in this second, in ms
    /// (`None`: none of them finished).
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// One sample of the queue.
pub struct Depth {
    pub at: f64,
    pub queued: i64,
    pub running: i64,
}

/// Writes the picture as SVG to `path`.
pub fn offered_svg(
    path: &Path,
    title: &str,
    seconds: &[Second],
    depth: &[Depth],
    slots: usize,
) -> Result<()> {
    let failed = |e: &dyn std::fmt::Display| anyhow!("plot {}: {e}", path.display());
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let root = root
        .titled(title, ("sans-serif", 18))
        .map_err(|e| failed(&e))?;
    let (upper, lower) = root.split_vertically(360);
    let x_end = seconds
        .iter()
        .map(|s| s.at + 1.0)
        .chain(depth.iter().map(|d| d.at))
        .fold(1.0, f64::max);

    // Latency spans orders of magnitude once a backlog builds: a log axis
    // keeps the quiet seconds readable beside the bad ones.
    let latencies = || seconds.iter().flat_map(|s| [s.p50_ms, s.p99_ms]).flatten();
    let y_low = latencies().fold(f64::INFINITY, f64::min).clamp(0.1, 1.0e6) * 0.8;
    let y_high = latencies().fold(1.0, f64::max) * 1.25;
    let mut chart = ChartBuilder::on(&upper)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .right_y_label_area_size(60)
        .build_cartesian_2d(0.0..x_end, (y_low..y_high.max(y_low * 2.0)).log_scale())
        .map_err(|e| failed(&e))?;
    chart
        .configure_mesh()
        .y_desc("end to end, ms (log)")
        .y_labels(12)
        .light_line_style(TRANSPARENT)
        .y_label_formatter(&|ms| format!("{ms:.0}"))
        .x_desc("second of the run (by scheduled submit)")
        .draw()
        .map_err(|e| failed(&e))?;
    for (name, color, pick) in [
        (
            "p50",
            BLUE,
            (|s: &Second| s.p50_ms) as fn(&Second) -> Option<f64>,
        ),
        ("p99", RED, |s: &Second| s.p99_ms),
    ] {
        let points = seconds
            .iter()
            .filter_map(|s| pick(s).map(|ms| (s.at + 0.5, ms)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| failed(&e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| failed(&e))?;

    // Waiting jobs run to tens of thousands when a rate is beyond the
    // shape, busy slots to the slots there are: each its own axis.
    let queued_high = depth.iter().map(|d| d.queued).fold(1, i64::max) as f64 * 1.1;
    let slots_high = depth.iter().map(|d| d.running).fold(slots as i64, i64::max) as f64 * 1.1;
    let mut chart = ChartBuilder::on(&lower)
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(70)
        .right_y_label_area_size(60)
        .build_cartesian_2d(0.0..x_end, 0.0..queued_high)
        .map_err(|e| failed(&e))?
        .set_secondary_coord(0.0..x_end, 0.0..slots_high);
    chart
        .configure_mesh()
        .y_desc("QUEUED jobs")
        .light_line_style(TRANSPARENT)
        .y_label_formatter(&|n| format!("{n:.0}"))
        .x_desc("second of the run (sampled)")
        .draw()
        .map_err(|e| failed(&e))?;
    chart
        .configure_secondary_axes()
        .y_desc("RUNNING (busy slots)")
        .y_label_formatter(&|n| format!("{n:.0}"))
        .draw()
        .map_err(|e| failed(&e))?;
    let queued = depth.iter().map(|d| (d.at, d.queued as f64));
    chart
        .draw_series(LineSeries::new(queued, MAGENTA.stroke_width(2)))
        .map_err(|e| failed(&e))?
        .label("QUEUED (left)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], MAGENTA));
    let running = depth.iter().map(|d| (d.at, d.running as f64));
    chart
        .draw_secondary_series(LineSeries::new(running, GREEN.stroke_width(2)))
        .map_err(|e| failed(&e))?
        .label("RUNNING (right)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREEN));
    let slots_line = [(0.0, slots as f64), (x_end, slots as f64)];
    chart
        .draw_secondary_series(LineSeries::new(slots_line, BLACK.mix(0.4)))
        .map_err(|e| failed(&e))?
        .label(format!("{slots} slots (right)"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.mix(0.4)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| failed(&e))?;
    root.present().map_err(|e| failed(&e))?;
    Ok(())
}
