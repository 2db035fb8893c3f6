//! The `receipt` binary end to end, against the real service: what it
//! prints, and the exit code that says how a job ended or why a command
//! failed.

use std::{path::Path, time::Duration};

use serde_json::Value;
use testkit::{Api, Backend, Finished, KEY_A, TestEnv, process::run_to_exit};

/// Runs `receipt` with `args` against `api`, as tenant-a, to its exit.
fn receipt(api: &Api, args: &[&str]) -> Finished {
    receipt_with(
        &[("RECEIPT_URL", &api.base), ("RECEIPT_API_KEY", KEY_A)],
        args,
    )
}

fn receipt_with(env: &[(&str, &str)], args: &[&str]) -> Finished {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    run_to_exit(
        Path::new(env!("CARGO_BIN_EXE_receipt")),
        args,
        &env,
        Duration::from_secs(120),
    )
}

fn code(run: &Finished) -> i32 {
    run.status.code().expect("an exit code, not a signal")
}

/// Asserts the run exited with `expected`, showing what it printed if not.
fn assert_exit(run: &Finished, expected: i32) {
    assert_eq!(
        code(run),
        expected,
        "stdout: {}\nstderr: {}",
        run.stdout,
        run.stderr
    );
}

fn json(run: &Finished) -> Value {
    serde_json::from_str(run.stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", run.stdout))
}

/// A failure's message: one line on stderr, never a panic's.
fn assert_one_line(run: &Finished) -> String {
    let text = run.stderr.trim();
    assert_eq!(text.lines().count(), 1, "stderr: {text}");
    assert!(text.starts_with("receipt: "), "stderr: {text}");
    assert!(!text.contains("panicked"), "stderr: {text}");
    text.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_waited_for_exits_by_how_its_job_ended() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded().await;

    let succeeded = receipt(
        &api,
        &[
            "submit", "sleep", "--param", "ms=300", "--wait", "--output", "json",
        ],
    );
    let failed = receipt(
        &api,
        &[
            "submit",
            "sleep",
            "--param",
            "fail_times=1",
            "--param",
            "permanent=true",
            "--wait",
            "--output",
            "json",
        ],
    );

    assert_exit(&succeeded, 0);
    let job = json(&succeeded);
    assert_eq!(job["status"], "SUCCEEDED");
    assert_eq!(job["params"]["ms"], 300);
    // Not a terminal: progress as plain lines on stderr, the job on stdout.
    let job_id = job["job_id"].as_str().expect("job_id");
    assert!(
        succeeded.stderr.lines().any(|l| l.starts_with(job_id)),
        "stderr: {}",
        succeeded.stderr
    );
    assert_exit(&failed, 1);
    assert_eq!(json(&failed)["status"], "FAILED");

    let result = receipt(&api, &["result", job_id]);
    assert_exit(&result, 0);
    assert_eq!(json(&result)["slept_ms"], 300);
    let failed_id = json(&failed)["job_id"].as_str().expect("id").to_owned();
    let listed = receipt(
        &api,
        &["jobs", "list", "--status", "FAILED", "--output", "json"],
    );
    assert_exit(&listed, 0);
    let ids: Vec<Value> = json(&listed)
        .as_array()
        .expect("a list")
        .iter()
        .map(|job| job["job_id"].clone())
        .collect();
    assert_eq!(ids, [Value::from(failed_id.clone())]);
    let table = receipt(&api, &["jobs", "get", &failed_id]);
    assert_exit(&table, 0);
    assert!(table.stdout.contains(&failed_id) && table.stdout.contains("FAILED"));
    let retried = receipt(&api, &["retry", &failed_id, "--output", "json"]);
    assert_exit(&retried, 0);
    assert_eq!(json(&retried)["retry_of"], Value::from(failed_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_and_a_wait_past_its_deadline_have_their_own_exit_codes() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded().await;
    let later = receipt(
        &api,
        &["submit", "sleep", "--delay", "3600", "--output", "json"],
    );
    assert_exit(&later, 0);
    let job_id = json(&later)["job_id"].as_str().expect("id").to_owned();

    let waited = receipt(&api, &["jobs", "wait", &job_id, "--timeout", "1"]);
    let cancelled = receipt(&api, &["cancel", &job_id, "--output", "json"]);
    let ended = receipt(&api, &["jobs", "wait", &job_id]);

    assert_exit(&waited, 6);
    assert!(waited.stderr.contains("still QUEUED"), "{}", waited.stderr);
    assert_exit(&cancelled, 0);
    assert_eq!(json(&cancelled)["status"], "CANCELLED");
    assert_exit(&ended, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_imported_from_a_file_exports_as_csv() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded().await;
    let file = env.dir().join("entries.json");
    std::fs::write(
        &file,
        r#"{"entries": [
            {"id": "inv-1", "date": "2026-10-03", "direction": "sale", "amount": "1000.00", "gst_rate": "18", "party": "=cmd"},
            {"id": "inv-2", "date": "2026-10-09", "direction": "purchase", "amount": "500.00", "gst_rate": "5", "interstate": true}
        ]}"#,
    )
    .expect("write entries");
    let file = file.to_str().expect("path");

    let imported = receipt(&api, &["ledger", "import", file, "--output", "json"]);
    let again = receipt(&api, &["ledger", "import", file, "--output", "json"]);
    let export = receipt(
        &api,
        &[
            "submit",
            "ledger-export",
            "--param",
            "from=2026-10-01",
            "--param",
            "to=2026-10-31",
            "--wait",
            "--output",
            "json",
        ],
    );
    let job_id = json(&export)["job_id"].as_str().expect("id").to_owned();
    let csv = receipt(&api, &["result", &job_id, "--csv"]);
    let summary = receipt(
        &api,
        &[
            "submit",
            "gst-summary",
            "--param",
            "month=2026-10",
            "--wait",
            "--output",
            "json",
        ],
    );

    assert_exit(&imported, 0);
    assert_eq!(
        json(&imported),
        serde_json::json!({"inserted": 2, "skipped": 0})
    );
    assert_eq!(
        json(&again),
        serde_json::json!({"inserted": 0, "skipped": 2})
    );
    assert_exit(&export, 0);
    assert_exit(&csv, 0);
    let lines: Vec<&str> = csv.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "id,date,direction,amount,gst_rate,interstate,party,description,igst,cgst,sgst"
    );
    assert_eq!(lines.len(), 3, "{}", csv.stdout);
    assert!(lines[1].starts_with("inv-1,2026-10-03,sale,1000.00,18,false,'=cmd"));
    assert_exit(&summary, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_schedules_months_and_the_filing_endpoint_are_managed_from_the_command_line() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded_with_local_receivers().await;

    let added = receipt(
        &api,
        &[
            "webhooks",
            "add",
            "http://127.0.0.1:9/hook",
            "--event",
            "job.failed",
            "--output",
            "json",
        ],
    );
    assert_exit(&added, 0);
    let webhook = json(&added);
    let webhook_id = webhook["id"].as_str().expect("id").to_owned();
    assert!(
        webhook["secret"]
            .as_str()
            .expect("secret")
            .starts_with("whsec_")
    );
    let listed = receipt(&api, &["webhooks", "list"]);
    let rotated = receipt(
        &api,
        &["webhooks", "rotate", &webhook_id, "--output", "json"],
    );
    let deleted = receipt(&api, &["webhooks", "delete", &webhook_id]);
    let gone = receipt(&api, &["webhooks", "get", &webhook_id]);

    assert_exit(&listed, 0);
    assert!(listed.stdout.contains(&webhook_id) && listed.stdout.contains("job.failed"));
    assert_exit(&rotated, 0);
    assert_ne!(json(&rotated)["secret"], webhook["secret"]);
    assert_exit(&deleted, 0);
    assert_exit(&gone, 4);
    assert!(assert_one_line(&gone).contains("404"));

    let created = receipt(
        &api,
        &[
            "schedules",
            "create",
            "gst-summary",
            "--param",
            r#"month={"$fire":"previous_month"}"#,
            "--cron",
            "0 6 1 * *",
            "--timezone",
            "Asia/Kolkata",
            "--output",
            "json",
        ],
    );
    assert_exit(&created, 0);
    let schedule = json(&created);
    let schedule_id = schedule["schedule_id"].as_str().expect("id").to_owned();
    assert_eq!(schedule["params"]["month"]["$fire"], "previous_month");
    let paused = receipt(
        &api,
        &["schedules", "pause", &schedule_id, "--output", "json"],
    );
    let resumed = receipt(
        &api,
        &["schedules", "resume", &schedule_id, "--output", "json"],
    );
    let listed = receipt(&api, &["schedules", "list"]);
    let got = receipt(
        &api,
        &["schedules", "get", &schedule_id, "--output", "json"],
    );
    let deleted = receipt(&api, &["schedules", "delete", &schedule_id]);
    let gone = receipt(&api, &["schedules", "get", &schedule_id]);

    assert_eq!(json(&paused)["paused"], true);
    assert_eq!(json(&resumed)["paused"], false);
    assert!(listed.stdout.contains(&schedule_id), "{}", listed.stdout);
    assert_eq!(json(&got)["cron"], "0 6 1 * *");
    assert_exit(&deleted, 0);
    assert_exit(&gone, 4);

    let set = receipt(
        &api,
        &[
            "filing-endpoint",
            "set",
            "http://127.0.0.1:9/returns",
            "--output",
            "json",
        ],
    );
    let read = receipt(&api, &["filing-endpoint", "get", "--output", "json"]);
    let month = receipt(&api, &["periods", "get", "2026-10", "--output", "json"]);
    let no_month = receipt(&api, &["periods", "reopen", "2026-13"]);

    assert_exit(&set, 0);
    assert!(
        json(&set)["secret"]
            .as_str()
            .expect("secret")
            .starts_with("whsec_")
    );
    assert_eq!(json(&read)["url"], "http://127.0.0.1:9/returns");
    assert_eq!(json(&read).get("secret"), None);
    assert_eq!(json(&month)["state"], "open");
    assert_exit(&no_month, 4);
    assert!(assert_one_line(&no_month).contains("month:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_one_line_naming_what_to_fix() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded().await;

    let no_value = receipt(&api, &["submit", "gst-summary", "--param", "month"]);
    let bad_month = receipt(&api, &["submit", "gst-summary", "--param", "month=2026-13"]);
    let unknown_kind = receipt(&api, &["submit", "no-such-kind"]);
    let unknown_command = receipt(&api, &["frobnicate"]);
    let bad_status = receipt(&api, &["jobs", "list", "--status", "DONE"]);
    let missing_file = receipt(&api, &["ledger", "import", "/nonexistent/entries.json"]);
    let no_key = receipt_with(&[("RECEIPT_URL", &api.base)], &["jobs", "list"]);
    let wrong_key = receipt_with(
        &[
            ("RECEIPT_URL", &api.base),
            ("RECEIPT_API_KEY", "not-a-key-of-anyone"),
        ],
        &["jobs", "list"],
    );
    let no_service = receipt_with(
        &[
            ("RECEIPT_URL", "http://127.0.0.1:9"),
            ("RECEIPT_API_KEY", KEY_A),
        ],
        &["jobs", "list", "--deadline", "1"],
    );
    let not_a_url = receipt_with(
        &[("RECEIPT_URL", "localhost"), ("RECEIPT_API_KEY", KEY_A)],
        &["jobs", "list"],
    );

    assert_exit(&no_value, 2);
    assert!(assert_one_line(&no_value).contains("NAME=VALUE"));
    assert_exit(&bad_month, 4);
    assert!(assert_one_line(&bad_month).contains("month:"));
    assert_exit(&unknown_kind, 4);
    assert!(assert_one_line(&unknown_kind).contains("404"));
    assert_exit(&unknown_command, 2);
    assert!(assert_one_line(&unknown_command).contains("frobnicate"));
    assert_exit(&bad_status, 2);
    assert!(assert_one_line(&bad_status).contains("--status"));
    assert_exit(&missing_file, 2);
    assert!(assert_one_line(&missing_file).contains("/nonexistent/entries.json"));
    assert_exit(&no_key, 2);
    assert!(assert_one_line(&no_key).contains("RECEIPT_API_KEY"));
    assert_exit(&wrong_key, 4);
    assert!(assert_one_line(&wrong_key).contains("401"));
    assert_exit(&no_service, 5);
    assert!(assert_one_line(&no_service).contains("no answer"));
    assert_exit(&not_a_url, 2);
    assert!(assert_one_line(&not_a_url).contains("localhost"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_are_registered_listed_and_deleted_and_workers_listed() {
    let env = TestEnv::new(Backend::Sqlite).await;
    let api = env.start_embedded().await;
    let declaration = env.dir().join("sales-export.json");
    std::fs::write(
        &declaration,
        r#"{"params_schema": {"type": "object"}, "timeout_secs": 60, "result_media_types": ["text/csv"]}"#,
    )
    .expect("the declaration");
    let file = declaration.to_str().expect("a path");

    let put = receipt(
        &api,
        &[
            "kinds",
            "put",
            "sales-export",
            "--file",
            file,
            "--output",
            "json",
        ],
    );
    assert_exit(&put, 0);
    assert_eq!(
        json(&put)["result_media_types"],
        serde_json::json!(["text/csv"])
    );
    let listed = receipt(&api, &["kinds", "list", "--output", "json"]);
    assert_exit(&listed, 0);
    let names: Vec<String> = json(&listed)
        .as_array()
        .expect("a list")
        .iter()
        .map(|kind| kind["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        names.contains(&"sales-export".to_owned()) && names.contains(&"gst-summary".to_owned()),
        "{names:?}"
    );
    let bad = receipt(&api, &["kinds", "put", "gst-summary", "--file", file]);
    assert_exit(&bad, 4);
    let workers = receipt(&api, &["workers", "--output", "json"]);
    assert_exit(&workers, 0);
    assert_eq!(json(&workers), serde_json::json!([]));
    let deleted = receipt(
        &api,
        &["kinds", "delete", "sales-export", "--output", "json"],
    );
    assert_exit(&deleted, 0);
    assert_eq!(json(&deleted)["active_jobs"], 0);
    assert_exit(&receipt(&api, &["kinds", "get", "sales-export"]), 4);
}
