//! The dashboard's pages, as maud templates. Everything a tenant wrote
//! (parameters, URLs, error messages) goes through maud's escaping.

use actix_web::http::StatusCode;
use maud::{DOCTYPE, Markup, html};
use shared::model::{Job, JobStatus, WaitReason};
use shared::work::{KindObject, WorkerObject};
use store::{Delivery, JobCounts, Scope, ThroughputMinute, Webhook, WebhookHealth};

use super::{PATH, Viewer};

pub struct Overview {
    pub counts: JobCounts,
    pub throughput: Vec<ThroughputMinute>,
    pub now: i64,
}

pub struct JobFilters {
    pub status: String,
    pub kind: String,
    pub kinds: Vec<&'static str>,
}

pub struct JobView {
    pub job: Job,
    /// The jobs that retry this one.
    pub retries: Vec<String>,
    pub has_csv: bool,
}

pub struct ScheduleRow {
    pub schedule: crate::routes::schedules::ScheduleObject,
    /// The pause or resume form's Idempotency-Key.
    pub toggle_key: String,
}

pub struct WebhookRow {
    pub webhook: Webhook,
    pub health: WebhookHealth,
    /// The enable form's Idempotency-Key; the rotate form has its own, as
    /// the two are different requests.
    pub enable_key: String,
    pub rotate_key: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Overview,
    Jobs,
    Schedules,
    Webhooks,
    Kinds,
    Keys,
    Audit,
    None,
}

fn layout(title: &str, viewer: Option<&Viewer>, section: Section, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Receipt" }
                link rel="stylesheet" href={ (PATH) "/assets/dashboard.css" };
                script src={ (PATH) "/assets/dashboard.js" } defer {}
            }
            body {
                header.top {
                    a.brand href=(PATH) { span.mark { "R" } "Receipt" }
                    @if let Some(viewer) = viewer {
                        nav {
                            (nav_link("Overview", PATH.to_owned(), section == Section::Overview))
                            (nav_link("Jobs", format!("{PATH}/jobs"), section == Section::Jobs))
                            (nav_link("Schedules", format!("{PATH}/schedules"), section == Section::Schedules))
                            (nav_link("Webhooks", format!("{PATH}/webhooks"), section == Section::Webhooks))
                            (nav_link("Kinds & workers", format!("{PATH}/kinds"), section == Section::Kinds))
                            @if viewer.may(Scope::Admin) {
                                (nav_link("Keys", format!("{PATH}/keys"), section == Section::Keys))
                                (nav_link("Audit log", format!("{PATH}/audit"), section == Section::Audit))
                            }
                        }
                        div.who {
                            span { "Tenant " strong #tenant { (viewer.caller.tenant_id) } }
                            span.muted #scopes title="What this session's key may do" {
                                (scope_words(viewer))
                            }
                            form method="post" action={ (PATH) "/sign-out" } {
                                (csrf(viewer))
                                button.link #sign-out type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The session key's scopes, as the header shows them.
fn scope_words(viewer: &Viewer) -> String {
    let scope = &viewer.caller.scope;
    if scope.is_full() {
        "full rights".to_owned()
    } else {
        scope
            .scopes()
            .into_iter()
            .map(Scope::name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn nav_link(label: &str, href: String, active: bool) -> Markup {
    html! { a.active[active] href=(href) { (label) } }
}

fn csrf(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf_token" value=(viewer.csrf_token); }
}

/// The fields every action form carries.
fn action_fields(viewer: &Viewer, idempotency_key: &str) -> Markup {
    html! {
        (csrf(viewer))
        input type="hidden" name="idempotency_key" value=(idempotency_key);
    }
}

pub fn sign_in(notice: Option<&str>, error: &str) -> Markup {
    let body = html! {
        section.card.sign-in {
            h1 { "Sign in" }
            p.muted { "Use one of your tenant's API keys. The dashboard shows that tenant's jobs and webhooks only." }
            @if let Some(notice) = notice { p.notice #notice { (notice) } }
            @if !error.is_empty() { p.error #error { (error) } }
            form method="post" action={ (PATH) "/sign-in" } {
                label for="api-key" { "API key" }
                input #api-key type="password" name="api_key" autocomplete="current-password" required autofocus;
                button.primary #sign-in type="submit" { "Sign in" }
            }
        }
    };
    layout("Sign in", None, Section::None, body)
}

pub fn message(viewer: Option<&Viewer>, status: StatusCode, message: &str) -> Markup {
    let title = status.canonical_reason().unwrap_or("Error");
    let body = html! {
        section.card {
            h1 { (title) }
            p.error #error { (message) }
            p { a href=(PATH) { "Back to the overview" } }
        }
    };
    layout(title, viewer, Section::None, body)
}

pub fn overview(viewer: &Viewer, figures: &Overview) -> Markup {
    let body = html! {
        h1 { "Overview" }
        div #overview data-refresh={ (PATH) "/overview" } data-every="5000" {
            (overview_panel(figures))
        }
    };
    layout("Overview", Some(viewer), Section::Overview, body)
}

fn count_of(counts: &std::collections::HashMap<JobStatus, i64>, status: JobStatus) -> i64 {
    counts.get(&status).copied().unwrap_or(0)
}

pub fn overview_panel(figures: &Overview) -> Markup {
    let counts = &figures.counts;
    let queued = count_of(&counts.by_status, JobStatus::Queued);
    let oldest = counts
        .oldest_queued_at
        .map(|at| duration_text(figures.now - at));
    let finished: i64 = figures
        .throughput
        .iter()
        .map(|m| m.succeeded + m.failed + m.cancelled)
        .sum();
    let failed: i64 = figures.throughput.iter().map(|m| m.failed).sum();
    html! {
        div.tiles {
            div.tile.queue {
                span.label { "Queue depth" }
                span.value #queue-depth { (queued) }
                span.sub { "oldest waiting " strong #oldest-queued { (oldest.as_deref().unwrap_or("—")) } }
            }
            @for status in JobStatus::ALL {
                a.tile href={ (PATH) "/jobs?status=" (status.as_str()) } {
                    span.label { (status_badge(status)) }
                    span.value id={ "count-" (status.as_str().to_lowercase()) } { (count_of(&counts.by_status, status)) }
                }
            }
        }
        section.card {
            div.card-head {
                h2 { "Last hour" }
                span.muted {
                    (finished) " finished, "
                    (percent(failed, finished)) " failed"
                }
            }
            (throughput_chart(&figures.throughput))
        }
        section.card {
            h2 { "By kind" }
            @if counts.by_kind.is_empty() {
                p.muted { "No jobs yet." }
            } @else {
                table {
                    thead { tr { th { "Kind" } @for status in JobStatus::ALL { th.num { (status.as_str()) } } } }
                    tbody {
                        @for (kind, by_status) in &counts.by_kind {
                            tr {
                                td { a href={ (PATH) "/jobs?kind=" (kind) } { (kind) } }
                                @for status in JobStatus::ALL {
                                    td.num { (count_of(by_status, status)) }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn percent(part: i64, whole: i64) -> String {
    if whole == 0 {
        "0%".to_owned()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Finished jobs per minute as stacked bars (succeeded, failed,
/// cancelled), and the failure rate as a line on a 0–100% scale.
fn throughput_chart(minutes: &[ThroughputMinute]) -> Markup {
    const WIDTH: f64 = 1000.0;
    const HEIGHT: f64 = 240.0;
    const LEFT: f64 = 44.0;
    const RIGHT: f64 = 48.0;
    const TOP: f64 = 12.0;
    const BOTTOM: f64 = 28.0;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let base = TOP + plot_h;
    let peak = minutes
        .iter()
        .map(|m| m.succeeded + m.failed + m.cancelled)
        .max()
        .unwrap_or(0)
        .max(1);
    // Four grid steps of a round size.
    let scale = 4 * nice_ceiling((peak + 3) / 4);
    let slot = plot_w / minutes.len().max(1) as f64;
    let bar = (slot * 0.72).max(1.0);
    let height_of = |n: i64| n as f64 / scale as f64 * plot_h;
    let mut rate_points = Vec::new();
    for (i, m) in minutes.iter().enumerate() {
        let total = m.succeeded + m.failed + m.cancelled;
        if total > 0 {
            let x = LEFT + slot * (i as f64 + 0.5);
            let y = base - m.failed as f64 / total as f64 * plot_h;
            rate_points.push(format!("{x:.1},{y:.1}"));
        }
    }
    html! {
        svg.chart #throughput-chart viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img"
            aria-label="Jobs finished per minute over the last hour, and the share that failed" {
            @for step in 0..=4 {
                @let y = base - plot_h * f64::from(step) / 4.0;
                line.grid x1=(LEFT) x2=(WIDTH - RIGHT) y1=(format!("{y:.1}")) y2=(format!("{y:.1}")) {}
                text.axis x=(LEFT - 6.0) y=(format!("{:.1}", y + 4.0)) text-anchor="end" {
                    (scale * i64::from(step) / 4)
                }
                text.axis.rate x=(WIDTH - RIGHT + 6.0) y=(format!("{:.1}", y + 4.0)) {
                    (step * 25) "%"
                }
            }
            @for (i, m) in minutes.iter().enumerate() {
                @let x = LEFT + slot * i as f64 + (slot - bar) / 2.0;
                @let mut top = base;
                g {
                    title { (minute_title(m)) }
                    @for (n, class) in [(m.succeeded, "ok"), (m.failed, "failed"), (m.cancelled, "cancelled")] {
                        @if n > 0 {
                            @let h = height_of(n);
                            @let y = { top -= h; top };
                            rect class=(class) x=(format!("{x:.1}")) y=(format!("{y:.1}")) width=(format!("{bar:.1}")) height=(format!("{h:.1}")) {}
                        }
                    }
                    rect.hit x=(format!("{:.1}", LEFT + slot * i as f64)) y=(TOP) width=(format!("{slot:.1}")) height=(plot_h) {}
                }
            }
            @if rate_points.len() > 1 {
                polyline.rate points=(rate_points.join(" ")) {}
            }
            text.axis x=(LEFT) y=(HEIGHT - 6.0) { "60 min ago" }
            text.axis x=(LEFT + plot_w / 2.0) y=(HEIGHT - 6.0) text-anchor="middle" { "30 min ago" }
            text.axis x=(WIDTH - RIGHT) y=(HEIGHT - 6.0) text-anchor="end" { "now" }
        }
        div.legend {
            span.key.ok { "succeeded" }
            span.key.failed { "failed" }
            span.key.cancelled { "cancelled" }
            span.key.rate { "failure rate (right axis)" }
        }
    }
}

fn minute_title(m: &ThroughputMinute) -> String {
    format!(
        "{}: {} succeeded, {} failed, {} cancelled",
        clock(m.start),
        m.succeeded,
        m.failed,
        m.cancelled
    )
}

/// 1, 2 or 5 times a power of ten, at least `n`.
fn nice_ceiling(n: i64) -> i64 {
    let mut power = 1;
    loop {
        for step in [1, 2, 5] {
            if step * power >= n {
                return step * power;
            }
        }
        power *= 10;
    }
}

fn status_badge(status: JobStatus) -> Markup {
    html! { span class={ "badge " (status.as_str().to_lowercase()) } { (status.as_str()) } }
}

/// Why a queued job waits, in words, with the end of the wait when known
/// (`Job::waiting_at`, the API's `waiting`).
fn waiting_text(job: &Job) -> Option<String> {
    let (reason, until) = job.waiting_at(shared::time::now_ms())?;
    let until = until.map(clock).unwrap_or_default();
    Some(match reason {
        WaitReason::Scheduled => format!("scheduled for {until}"),
        WaitReason::RetryBackoff => format!("retry backoff until {until}"),
        WaitReason::Queued => "waiting for a free worker".to_owned(),
        WaitReason::TenantConcurrencyLimit => {
            "parked: the tenant runs its most jobs at once (MAX_RUNNING_PER_TENANT)".to_owned()
        }
        WaitReason::KindConcurrencyLimit => {
            "parked: the tenant runs its most jobs of this kind at once (MAX_RUNNING_PER_KIND)"
                .to_owned()
        }
    })
}

pub fn jobs(
    viewer: &Viewer,
    filters: &JobFilters,
    jobs: &[Job],
    next_cursor: Option<&str>,
    problems: &[String],
) -> Markup {
    let next = next_cursor.map(|cursor| {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        if !filters.status.is_empty() {
            query.append_pair("status", &filters.status);
        }
        if !filters.kind.is_empty() {
            query.append_pair("kind", &filters.kind);
        }
        query.append_pair("cursor", cursor);
        format!("{PATH}/jobs?{}", query.finish())
    });
    let body = html! {
        h1 { "Jobs" }
        form.filters #job-filters method="get" action={ (PATH) "/jobs" } {
            label { "Status "
                select name="status" {
                    option value="" selected[filters.status.is_empty()] { "any" }
                    @for status in JobStatus::ALL {
                        option value=(status.as_str()) selected[filters.status == status.as_str()] { (status.as_str()) }
                    }
                }
            }
            label { "Kind "
                select name="kind" {
                    option value="" selected[filters.kind.is_empty()] { "any" }
                    @for kind in &filters.kinds {
                        option value=(kind) selected[filters.kind == *kind] { (kind) }
                    }
                }
            }
            button type="submit" { "Filter" }
            @if !filters.status.is_empty() || !filters.kind.is_empty() {
                a href={ (PATH) "/jobs" } { "clear" }
            }
        }
        @for problem in problems { p.error.problem { (problem) } }
        @if problems.is_empty() {
            section.card.flush {
                @if jobs.is_empty() {
                    p.muted.pad { "No jobs match." }
                } @else {
                    table #jobs {
                        thead { tr { th { "Job" } th { "Kind" } th { "Status" } th.num { "Attempts" } th { "Progress" } th { "Created (UTC)" } th { "Finished (UTC)" } } }
                        tbody {
                            @for job in jobs {
                                tr data-job-id=(job.job_id) {
                                    td.mono.nowrap { a href={ (PATH) "/jobs/" (job.job_id) } { (short_id(&job.job_id)) } }
                                    td { (job.kind) }
                                    td {
                                        (status_badge(job.status))
                                        @if let Some(waiting) = waiting_text(job) {
                                            br; span.muted.waiting { (waiting) }
                                        }
                                    }
                                    td.num { (job.attempts) " / " (job.max_attempts) }
                                    td.nowrap { (progress_bar(job)) }
                                    td.nowrap { (short_clock(job.created_at)) }
                                    td.nowrap { (job.finished_at.map(short_clock).unwrap_or_default()) }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(next) = next {
                p.pager { a #next-page href=(next) { "Older jobs →" } }
            }
        }
    };
    layout("Jobs", Some(viewer), Section::Jobs, body)
}

fn short_id(id: &str) -> String {
    // The prefix and the end of the id, where ids made close together differ.
    match id.split_once('_') {
        Some((prefix, rest)) if rest.len() > 12 => {
            format!("{prefix}_…{}", &rest[rest.len() - 12..])
        }
        _ => id.to_owned(),
    }
}

fn progress_bar(job: &Job) -> Markup {
    match job.progress {
        Some(progress) => html! {
            progress max="100" value=(format!("{:.0}", progress * 100.0)) {}
            span.muted { " " (format!("{:.0}%", progress * 100.0)) }
        },
        None => html! { span.muted { "—" } },
    }
}

pub fn job(viewer: &Viewer, view: &JobView, notice: Option<&str>) -> Markup {
    let job = &view.job;
    let body = html! {
        p.crumbs { a href={ (PATH) "/jobs" } { "Jobs" } " / " span.mono { (job.job_id) } }
        @if let Some(notice) = notice { p.notice #notice { (notice) } }
        div #job data-refresh={ (PATH) "/jobs/" (job.job_id) "/live" } data-every="1000" {
            (job_panel(viewer, view))
        }
    };
    layout(
        &format!("Job {}", short_id(&job.job_id)),
        Some(viewer),
        Section::Jobs,
        body,
    )
}

/// A job's status and actions. Its forms' Idempotency-Keys name the job
/// and the action, not the page: the panel refreshes itself without
/// changing while the job does not, and a job's retry from the dashboard,
/// clicked twice or by two people, makes one new job.
pub fn job_panel(viewer: &Viewer, view: &JobView) -> Markup {
    let job = &view.job;
    let params = serde_json::from_str::<serde_json::Value>(&job.params)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| job.params.clone());
    let retryable = matches!(job.status, JobStatus::Failed | JobStatus::Cancelled);
    html! {
        // Marks a job that will not change: the page stops refreshing.
        @if job.status.is_final() { span data-final {} }
        section.card {
            div.card-head {
                h1 { (job.kind) " " span #job-status { (status_badge(job.status)) } }
                div.actions {
                    @if !job.status.is_final() && viewer.may(Scope::Submit) {
                        form method="post" action={ (PATH) "/jobs/" (job.job_id) "/cancel" } {
                            (action_fields(viewer, &format!("dashboard-cancel-{}", job.job_id)))
                            button.danger #cancel type="submit" disabled[job.cancel_requested] {
                                @if job.cancel_requested { "Cancel requested" } @else { "Cancel" }
                            }
                        }
                    }
                    @if retryable && viewer.may(Scope::Submit)
                        && (job.kind != reports::PERIOD_CLOSE || viewer.may(Scope::Close)) {
                        form method="post" action={ (PATH) "/jobs/" (job.job_id) "/retry" } {
                            (action_fields(viewer, &format!("dashboard-retry-{}", job.job_id)))
                            button.primary #retry type="submit" { "Retry as a new job" }
                        }
                    }
                    @if job.status == JobStatus::Succeeded {
                        a.button #download-json href={ (PATH) "/jobs/" (job.job_id) "/result" } { "Download JSON" }
                        @if view.has_csv {
                            a.button #download-csv href={ (PATH) "/jobs/" (job.job_id) "/result?format=csv" } { "Download CSV" }
                        }
                    }
                }
            }
            dl.facts {
                dt { "Job" } dd.mono { (job.job_id) }
                dt { "Attempts" } dd #job-attempts { (job.attempts) " of at most " (job.max_attempts) }
                dt { "Progress" } dd #job-progress { (progress_bar(job)) }
                @if job.status == JobStatus::Running {
                    @if let Some(worker) = job.worker_name() {
                        dt { "Held by" } dd.mono #job-worker { (worker) }
                    }
                }
                dt { "Created" } dd { (clock(job.created_at)) }
                dt { "Started" } dd { (job.started_at.map(clock).unwrap_or_else(|| "—".into())) }
                dt { "Finished" } dd { (job.finished_at.map(clock).unwrap_or_else(|| "—".into())) }
                @if let Some(waiting) = waiting_text(job) {
                    dt { "Waiting" } dd #job-waiting { (waiting) }
                }
                @if let Some(schedule) = &job.schedule_id {
                    dt { "Schedule" } dd.mono { a #schedule href={ (PATH) "/schedules/" (schedule) } { (schedule) } }
                }
                @if let Some(original) = &job.retry_of {
                    dt { "Retry of" } dd.mono { a #retry-of href={ (PATH) "/jobs/" (original) } { (original) } }
                }
                @if !view.retries.is_empty() {
                    dt { "Retried as" }
                    dd.mono {
                        @for retry in &view.retries {
                            a.retried-by href={ (PATH) "/jobs/" (retry) } { (retry) } br;
                        }
                    }
                }
            }
            @if let (Some(kind), Some(message)) = (&job.error_type, &job.error_message) {
                @if job.status != JobStatus::Succeeded {
                    div.error-box #job-error {
                        strong { (kind) } ": " (message)
                        @if !job.status.is_final() { span.muted { " (the last attempt's; it is retried)" } }
                    }
                }
            }
        }
        section.card {
            h2 { "Parameters" }
            pre #job-params { (params) }
        }
    }
}

pub fn webhooks(
    viewer: &Viewer,
    rows: &[WebhookRow],
    next_cursor: Option<&str>,
    problems: &[String],
) -> Markup {
    let body = html! {
        h1 { "Webhooks" }
        p.muted { "Success rate and attempts over the last 24 hours." }
        @for problem in problems { p.error.problem { (problem) } }
        @if problems.is_empty() {
            section.card.flush {
                @if rows.is_empty() {
                    p.muted.pad { "No webhooks. Register one with POST /v1/webhooks." }
                } @else {
                    table #webhooks {
                        thead { tr { th { "URL" } th { "Events" } th { "State" } th.num { "Attempts" } th.num { "Success" } th { "Last error" } th {} } }
                        tbody {
                            @for row in rows {
                                tr data-webhook-id=(row.webhook.webhook_id) {
                                    td.url { a href={ (PATH) "/webhooks/" (row.webhook.webhook_id) } { (row.webhook.url) } }
                                    td { (row.webhook.events.join(", ")) @if let Some(job) = &row.webhook.job_id { br; span.muted.mono { "job " (short_id(job)) } } }
                                    td { (enabled_badge(&row.webhook)) }
                                    td.num { (row.health.attempts) }
                                    td.num { (success_rate(&row.health)) }
                                    td { (last_error(&row.health)) }
                                    td.actions { (webhook_actions(viewer, row)) }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(cursor) = next_cursor {
                p.pager { a href={ (PATH) "/webhooks?cursor=" (cursor) } { "Older webhooks →" } }
            }
        }
    };
    layout("Webhooks", Some(viewer), Section::Webhooks, body)
}

/// The kinds the tenant may submit (built in, and its registered ones,
/// which its workers over HTTP run) and those workers.
pub fn kinds(viewer: &Viewer, kinds: &[KindObject], workers: &[WorkerObject]) -> Markup {
    let body = html! {
        h1 { "Kinds & workers" }
        p.muted { "Registered kinds are run by the tenant's own workers over HTTP (PUT /v1/kinds/{name}; docs/workers.md)." }
        section.card.flush {
            table #kinds {
                thead { tr { th { "Kind" } th { "Run by" } th { "Timeout" } th { "Attempts" } th { "Results" } th { "About" } } }
                tbody {
                    @for kind in kinds {
                        tr data-kind=(kind.name) {
                            td.mono { (kind.name) }
                            td { @if kind.builtin { "Receipt" } @else { "its workers" } }
                            td.nowrap { (kind.timeout_secs) " s" }
                            td { (kind.max_attempts) }
                            td.mono { (kind.result_media_types.as_deref().map(|t| t.join(", ")).unwrap_or_else(|| "application/json".into())) }
                            td { (kind.about) }
                        }
                    }
                }
            }
        }
        h2 { "Workers" }
        section.card.flush {
            @if workers.is_empty() {
                p.muted.pad #no-workers { "No worker has leased yet. A worker needs a key with the work scope: api keys create --tenant T --scope work." }
            } @else {
                table #workers {
                    thead { tr { th { "Worker" } th { "Kinds" } th { "State" } th { "Holds" } th { "Leased" } th { "Failed" } th { "Last seen (UTC)" } } }
                    tbody {
                        @for worker in workers {
                            tr data-worker=(worker.name) {
                                td.mono { (worker.name) }
                                td.mono { (worker.kinds.join(", ")) }
                                td { @if worker.connected { span.badge.ok { "connected" } } @else { span.badge { "gone" } } }
                                td.holding { (worker.holding) }
                                td { (worker.leased) }
                                td { (worker.failed) }
                                td.nowrap { (worker.last_seen_at) }
                            }
                        }
                    }
                }
            }
        }
    };
    layout("Kinds & workers", Some(viewer), Section::Kinds, body)
}

pub fn schedules(
    viewer: &Viewer,
    rows: &[ScheduleRow],
    next_cursor: Option<&str>,
    problems: &[String],
) -> Markup {
    let body = html! {
        h1 { "Schedules" }
        p.muted { "Each fire makes one job; times are UTC." }
        @for problem in problems { p.error.problem { (problem) } }
        @if problems.is_empty() {
            section.card.flush {
                @if rows.is_empty() {
                    p.muted.pad { "No schedules. Create one with POST /v1/schedules." }
                } @else {
                    table #schedules {
                        thead { tr { th { "Schedule" } th { "Kind" } th { "Cron" } th { "Next fires (UTC)" } th { "Last fire (UTC)" } th { "State" } th {} } }
                        tbody {
                            @for row in rows {
                                @let s = &row.schedule;
                                tr data-schedule-id=(s.schedule_id) {
                                    td.mono.nowrap { a href={ (PATH) "/schedules/" (s.schedule_id) } { (short_id(&s.schedule_id)) } }
                                    td { (s.kind) }
                                    td.mono { (s.cron) br; span.muted { (s.timezone) } }
                                    td.nowrap { (fire_list(&s.next_fires, 3)) }
                                    td.nowrap { (s.last_fire_at.as_deref().map(short_fire).unwrap_or_default()) }
                                    td { (paused_badge(s.paused)) }
                                    td.actions { (schedule_toggle(viewer, row)) }
                                }
                            }
                        }
                    }
                }
            }
            @if let Some(cursor) = next_cursor {
                p.pager { a href={ (PATH) "/schedules?cursor=" (cursor) } { "Older schedules →" } }
            }
        }
    };
    layout("Schedules", Some(viewer), Section::Schedules, body)
}

pub fn schedule(viewer: &Viewer, row: &ScheduleRow, jobs: &[Job], notice: Option<&str>) -> Markup {
    let s = &row.schedule;
    let body = html! {
        h1 { "Schedule " span.mono { (short_id(&s.schedule_id)) } }
        @if let Some(notice) = notice { p.notice #notice { (notice) } }
        section.card {
            div.actions { (schedule_toggle(viewer, row)) }
            dl.facts {
                dt { "Schedule" } dd.mono { (s.schedule_id) }
                dt { "Kind" } dd { (s.kind) }
                dt { "Params" } dd.mono { (s.params.to_string()) }
                dt { "Cron" } dd.mono { (s.cron) " (" (s.timezone) ")" }
                dt { "Missed fires" } dd { (s.misfire) }
                dt { "State" } dd #schedule-state { (paused_badge(s.paused)) }
                dt { "Next fires (UTC)" } dd #next-fires { (fire_list(&s.next_fires, 5)) }
                dt { "Last fire (UTC)" } dd { (s.last_fire_at.as_deref().map(short_fire).unwrap_or_else(|| "—".into())) }
            }
        }
        h2 { "Latest jobs" }
        section.card.flush {
            @if jobs.is_empty() {
                p.muted.pad { "No job yet." }
            } @else {
                table #schedule-jobs {
                    thead { tr { th { "Job" } th { "Status" } th { "Created (UTC)" } th { "Finished (UTC)" } } }
                    tbody {
                        @for job in jobs {
                            tr data-job-id=(job.job_id) {
                                td.mono.nowrap { a href={ (PATH) "/jobs/" (job.job_id) } { (short_id(&job.job_id)) } }
                                td { (status_badge(job.status)) }
                                td.nowrap { (short_clock(job.created_at)) }
                                td.nowrap { (job.finished_at.map(short_clock).unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
        }
    };
    layout("Schedule", Some(viewer), Section::Schedules, body)
}

fn schedule_toggle(viewer: &Viewer, row: &ScheduleRow) -> Markup {
    if !viewer.may(Scope::Manage) {
        return html! {};
    }
    let s = &row.schedule;
    let (action, label) = if s.paused {
        ("resume", "Resume")
    } else {
        ("pause", "Pause")
    };
    html! {
        form method="post" action={ (PATH) "/schedules/" (s.schedule_id) "/" (action) } {
            (action_fields(viewer, &row.toggle_key))
            button.small type="submit" { (label) }
        }
    }
}

fn paused_badge(paused: bool) -> Markup {
    if paused {
        html! { span.badge.cancelled { "paused" } }
    } else {
        html! { span.badge.succeeded { "active" } }
    }
}

/// An RFC 3339 fire as a table shows it.
fn short_fire(text: &str) -> String {
    shared::time::parse_rfc3339(text)
        .map(short_clock)
        .unwrap_or_else(|| text.to_owned())
}

fn fire_list(fires: &[String], most: usize) -> Markup {
    html! {
        @if fires.is_empty() { span.muted { "none" } }
        @for (n, fire) in fires.iter().take(most).enumerate() {
            @if n > 0 { br; }
            (short_fire(fire))
        }
    }
}

fn enabled_badge(webhook: &Webhook) -> Markup {
    if webhook.enabled {
        html! { span.badge.succeeded { "enabled" } }
    } else {
        html! { span.badge.failed { "disabled" } }
    }
}

fn success_rate(health: &WebhookHealth) -> String {
    if health.attempts == 0 {
        "—".to_owned()
    } else {
        percent(health.succeeded, health.attempts)
    }
}

fn last_error(health: &WebhookHealth) -> Markup {
    match &health.last_error {
        Some((at, why)) => html! { span.error-text { (why) } br; span.muted { (clock(*at)) } },
        None => html! { span.muted { "none" } },
    }
}

fn webhook_actions(viewer: &Viewer, row: &WebhookRow) -> Markup {
    if !viewer.may(Scope::Manage) {
        return html! {};
    }
    let id = &row.webhook.webhook_id;
    html! {
        @if !row.webhook.enabled {
            form method="post" action={ (PATH) "/webhooks/" (id) "/enable" } {
                (action_fields(viewer, &row.enable_key))
                button.primary.small type="submit" { "Enable" }
            }
        }
        form method="post" action={ (PATH) "/webhooks/" (id) "/rotate-secret" }
            data-confirm="Rotate the secret? The current one stops signing at once." {
            (action_fields(viewer, &row.rotate_key))
            button.small type="submit" { "Rotate secret" }
        }
    }
}

pub fn webhook(
    viewer: &Viewer,
    row: &WebhookRow,
    deliveries: &[Delivery],
    notice: Option<&str>,
    new_secret: Option<&str>,
) -> Markup {
    let webhook = &row.webhook;
    let body = html! {
        p.crumbs { a href={ (PATH) "/webhooks" } { "Webhooks" } " / " span.mono { (webhook.webhook_id) } }
        @if let Some(notice) = notice { p.notice #notice { (notice) } }
        @if let Some(secret) = new_secret {
            div.notice.secret {
                p { strong { "The new secret" } " (shown only now; the old one no longer signs):" }
                pre.mono #new-secret { (secret) }
            }
        }
        section.card {
            div.card-head {
                h1.url { (webhook.url) }
                div.actions { (webhook_actions(viewer, row)) }
            }
            dl.facts {
                dt { "State" } dd { (enabled_badge(webhook)) }
                dt { "Events" } dd { (webhook.events.join(", ")) }
                @if let Some(job) = &webhook.job_id {
                    dt { "Job" } dd.mono { a href={ (PATH) "/jobs/" (job) } { (job) } }
                }
                dt { "Created" } dd { (clock(webhook.created_at)) }
                dt { "Last 24 h" } dd { (row.health.attempts) " attempts, " (success_rate(&row.health)) " succeeded" }
                dt { "Last error" } dd { (last_error(&row.health)) }
            }
        }
        section.card.flush {
            h2.pad { "Recent deliveries" }
            @if deliveries.is_empty() {
                p.muted.pad { "None yet." }
            } @else {
                table #deliveries {
                    thead { tr { th { "When" } th { "Event" } th.num { "Attempt" } th { "Answer" } th.num { "Took" } th { "Next attempt" } } }
                    tbody {
                        @for d in deliveries {
                            tr {
                                td { (clock(d.attempted_at)) }
                                td { (d.event_type) br; span.muted.mono { (d.event_id) } }
                                td.num { (d.attempt) }
                                td {
                                    @match (d.response_status, &d.error) {
                                        (Some(status), _) if (200..300).contains(&status) => span.badge.succeeded { (status) },
                                        (Some(status), _) => span.badge.failed { (status) },
                                        (None, Some(error)) => span.error-text { (error) },
                                        (None, None) => span.muted { "—" },
                                    }
                                }
                                td.num { (d.duration_ms) " ms" }
                                td { (d.next_attempt_at.map(clock).unwrap_or_else(|| "—".into())) }
                            }
                        }
                    }
                }
            }
        }
    };
    layout("Webhook", Some(viewer), Section::Webhooks, body)
}

/// A time as people read it, in UTC.
fn clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// [`clock`] for a table cell, where the header says UTC.
fn short_clock(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

/// A duration in the largest units that say it: `42 s`, `3 min 5 s`, `2 h 10 min`.
fn duration_text(ms: i64) -> String {
    let secs = (ms / 1000).max(0);
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min {} s", secs / 60, secs % 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}

/// The tenant's keys and their scopes; never a key.
pub fn keys(viewer: &Viewer, keys: &[crate::routes::keys::KeyObject]) -> Markup {
    let body = html! {
        section.card {
            div.card-head { h1 { "Keys" } }
            p.muted { "The tenant's API keys and what each may do. Keys are made and revoked with the API (POST and DELETE /v1/keys) or with api keys on the server." }
            table #keys {
                thead { tr { th { "Key id" } th { "Scopes" } th { "Begins with" } th { "Made" } th { "Last used" } th { "Revoked" } } }
                tbody {
                    @for key in keys {
                        tr {
                            td { code { (key.id) } @if key.id == viewer.caller.key_id { " " span.badge.succeeded { "this session" } } }
                            td.scopes {
                                @if key.full { "full rights" } @else { (key.scopes.join(", ")) }
                                @if let Some(kinds) = &key.kinds { span.muted { " (kinds: " (kinds.join(", ")) ")" } }
                            }
                            td { @if let Some(prefix) = &key.prefix { code { (prefix) "…" } } }
                            td { (key.created_at) }
                            td { (key.last_used_at.as_deref().unwrap_or("never")) }
                            td { (key.revoked_at.as_deref().unwrap_or("-")) }
                        }
                    }
                }
            }
        }
    };
    layout("Keys", Some(viewer), Section::Keys, body)
}

/// The audit log: who changed what, newest first, a page at a time.
pub fn audit(
    viewer: &Viewer,
    entries: &[crate::routes::keys::AuditEntryObject],
    action: &str,
    next: Option<&str>,
    errors: &[String],
) -> Markup {
    let body = html! {
        section.card {
            div.card-head { h1 { "Audit log" } }
            p.muted { "Every change to this tenant's keys, webhooks, schedules, filing endpoint, months and kinds: who made it, when, and the request's id." }
            @for error in errors { p.error { (error) } }
            form.filters method="get" action={ (PATH) "/audit" } {
                label for="action" { "Action" }
                select #action name="action" {
                    option value="" selected[action.is_empty()] { "any" }
                    @for known in store::AuditAction::ALL {
                        option value=(known.name()) selected[action == known.name()] { (known.name()) }
                    }
                }
                button type="submit" { "Filter" }
            }
            @if entries.is_empty() {
                p.muted #no-entries { "No entries." }
            } @else {
                table #audit-entries {
                    thead { tr { th { "When" } th { "Action" } th { "Target" } th { "Who" } th { "Request" } th { "Details" } } }
                    tbody {
                        @for entry in entries {
                            tr {
                                td { (entry.at) }
                                td { code { (entry.action) } }
                                td { @if let Some(target) = &entry.target { code { (target) } } }
                                td {
                                    @match (&entry.key_id, &entry.job_id) {
                                        (Some(key_id), _) => { "key " code { (key_id) } },
                                        (_, Some(job_id)) => { "job " a href={ (PATH) "/jobs/" (job_id) } { code { (job_id) } } },
                                        _ => { (entry.actor) },
                                    }
                                }
                                td { @if let Some(request_id) = &entry.request_id { code { (request_id) } } }
                                td { code { (entry.details.to_string()) } }
                            }
                        }
                    }
                }
            }
            @if let Some(next) = next {
                a.button #next href={ (PATH) "/audit?action=" (action) "&cursor=" (next) } { "Older" }
            }
        }
    };
    layout("Audit log", Some(viewer), Section::Audit, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_scales_round_up_to_one_two_or_five() {
        assert_eq!(nice_ceiling(1), 1);
        assert_eq!(nice_ceiling(7), 10);
        assert_eq!(nice_ceiling(11), 20);
        assert_eq!(nice_ceiling(380), 500);
    }

    #[test]
    fn durations_read_in_their_largest_units() {
        assert_eq!(duration_text(42_000), "42 s");
        assert_eq!(duration_text(185_000), "3 min 5 s");
        assert_eq!(duration_text(7_800_000), "2 h 10 min");
    }
}
