//! What the command line prints: the API's objects as JSON for scripts,
//! or as tables for people; and a job's progress while it is waited for.

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use indicatif::{ProgressBar, ProgressStyle};
use receipt_client::Job;
use serde::Serialize;
use serde_json::Value;

use crate::args::Output;

pub struct Show {
    output: Output,
}

/// The columns of a job in a list.
const JOB_COLUMNS: &[&str] = &[
    "job_id",
    "kind",
    "status",
    "progress",
    "created_at",
    "finished_at",
];

impl Show {
    pub fn new(output: Output) -> Self {
        Show { output }
    }

    pub fn job(&self, job: &Job) {
        self.record(job);
    }

    pub fn jobs(&self, jobs: &[Job]) {
        self.rows(jobs, JOB_COLUMNS);
    }

    /// One object: as JSON, or a table of its members.
    pub fn record(&self, item: &impl Serialize) {
        let value = serde_json::to_value(item).unwrap_or_default();
        self.value(&value);
    }

    pub fn value(&self, value: &Value) {
        match self.output {
            Output::Json => println!("{value}"),
            Output::Table => {
                let mut table = Table::new();
                table.load_preset(UTF8_BORDERS_ONLY);
                if let Value::Object(members) = value {
                    for (name, member) in members {
                        table.add_row(vec![name.clone(), cell(member)]);
                    }
                } else {
                    table.add_row(vec![cell(value)]);
                }
                println!("{table}");
            }
        }
    }

    /// A list: as JSON (one array), or a table of these columns.
    pub fn rows<T: Serialize>(&self, items: &[T], columns: &[&str]) {
        let values: Vec<Value> = items
            .iter()
            .map(|item| serde_json::to_value(item).unwrap_or_default())
            .collect();
        match self.output {
            Output::Json => println!("{}", Value::Array(values)),
            Output::Table => {
                let mut table = Table::new();
                table.load_preset(UTF8_BORDERS_ONLY);
                table.set_header(columns.to_vec());
                for value in &values {
                    table.add_row(columns.iter().map(|c| cell(&value[*c])));
                }
                println!("{table}");
                println!("{} in all", values.len());
            }
        }
    }

    /// A change with nothing to show but that it was made.
    pub fn done(&self, what: &str) {
        match self.output {
            Output::Json => println!("{}", serde_json::json!({ "done": what })),
            Output::Table => println!("{what}"),
        }
    }
}

/// A member as a table cell: text bare, nothing for null, JSON otherwise.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// A job's progress while it is waited for: a bar on a terminal, a line
/// per change otherwise (a log, a CI run), both on stderr so stdout holds
/// only the answer.
pub struct Progress {
    bar: Option<ProgressBar>,
    last: Option<(String, Option<u64>)>,
}

impl Progress {
    pub fn new(job: &Job, terminal: bool) -> Self {
        let bar = terminal.then(|| {
            let bar = ProgressBar::new(100);
            if let Ok(style) =
                ProgressStyle::with_template("{prefix} [{bar:30}] {pos:>3}% {msg} {elapsed}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(job.job_id.clone());
            bar
        });
        let mut progress = Progress { bar, last: None };
        progress.update(job);
        progress
    }

    pub fn update(&mut self, job: &Job) {
        let percent = job
            .progress
            .map(|p| (p.clamp(0.0, 1.0) * 100.0).round() as u64);
        let now = (job.status.as_str().to_owned(), percent);
        if self.last.as_ref() == Some(&now) {
            return;
        }
        match &self.bar {
            Some(bar) => {
                bar.set_position(percent.unwrap_or(0));
                bar.set_message(job.status.as_str());
            }
            None => match percent {
                Some(percent) => eprintln!("{} {} {percent}%", job.job_id, job.status.as_str()),
                None => eprintln!("{} {}", job.job_id, job.status.as_str()),
            },
        }
        self.last = Some(now);
    }

    pub fn finish(self) {
        // The job is shown in full next; the bar would only repeat it.
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
