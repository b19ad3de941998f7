//! The HTTP side: routes, pages, the live SSE streams, tokens and same-origin checks.

use mozart_ipc::sheet_view::{SheetMode, SheetQuery, SheetsView};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Extension, Form, Path as UrlPath, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use futures_util::Stream;
use minijinja::{context, Environment, Value as JValue};
use mozart_ipc::checkpoint::HookResult;
use mozart_ipc::status::{JobListEntry, JobProgress};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::broadcast;

use crate::session::{constant_eq, Keys};
use crate::view::{self, JobDetail, JobRow, JobSummary};
use crate::{chart, learning, token, validate, DashboardError, Options};
use mozart_client::{Conductor, OpError};

const CSS: &str = include_str!("style.css");
const JS: &str = include_str!("app.js");
/// Most job summaries fetched per render (the rest come on later renders).
const SUMMARY_FETCHES: usize = 16;
/// Rows of the jobs page (newest first); a page that does not show every job says so.
const JOBS_PAGE: usize = 100;

/// The jobs page's data: rows (or the error), jobs in all, counts per status, and
/// (shown, matching) when the page is cut.
type RowsView = (
    Result<Vec<JobRow>, OpError>,
    usize,
    Vec<(String, usize)>,
    Option<(usize, usize)>,
);
/// How often an open page is refreshed without any event (elapsed times, log tails).
const IDLE_REFRESH: Duration = Duration::from_secs(5);
/// How often a job page with a running sheet is refreshed (its live output).
const RUNNING_REFRESH: Duration = Duration::from_secs(1);
/// Bytes of a running sheet's output shown.
const LOG_TAIL_BYTES: u64 = 4096;
/// Flash messages kept.
const FLASH_LIMIT: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Shared state of one dashboard.
struct App {
    conductor: Conductor,
    learning_db: PathBuf,
    env: Environment<'static>,
    /// Keys derived from the access token (the user's `--token`, or the owner's file).
    keys: Keys,
    /// The access token, for the login URL printed to the owner.
    token: String,
    /// The owner's token file, when the token came from it.
    token_file: Option<PathBuf>,
    /// Name of this dashboard's session cookie (cookies ignore ports: one per port).
    cookie_name: String,
    /// Host header values accepted (DNS-rebinding guard on loopback binds).
    allowed_hosts: Vec<String>,
    summaries: Mutex<HashMap<String, (String, JobSummary)>>,
    /// Job ids that changed (empty = everything, e.g. the conductor came or went).
    changes: broadcast::Sender<Arc<str>>,
    conductor_up: AtomicBool,
    flashes: Mutex<VecDeque<(String, &'static str, String)>>,
}

/// A bound, not yet serving, dashboard.
pub struct Dashboard {
    app: Arc<App>,
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
}

impl Dashboard {
    /// Check the options, load the templates and bind the address.
    pub async fn bind(options: Options) -> Result<Dashboard, DashboardError> {
        options.check()?;
        let addr = SocketAddr::new(options.host, options.port);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| DashboardError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| DashboardError::Bind { addr, source })?;
        let app = Arc::new(App::new(&options, addr)?);
        Ok(Dashboard {
            app,
            listener,
            addr,
        })
    }

    /// The URL served.
    pub fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL with the access token: opening it logs in (the owner's token file only;
    /// a `--token` given by the user is never printed back).
    pub fn login_url(&self) -> String {
        format!("http://{}/?token={}", self.addr, self.app.token)
    }

    /// The owner's token file, when the token came from it (no `--token`).
    pub fn token_file(&self) -> Option<&Path> {
        self.app.token_file.as_deref()
    }

    /// Serve until `shutdown` completes.
    pub async fn serve_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), DashboardError> {
        let watcher = tokio::spawn(watch_monitor(self.app.clone()));
        let router = router(self.app);
        let result = axum::serve(self.listener, router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(DashboardError::Serve);
        watcher.abort();
        result
    }
}

impl App {
    fn new(options: &Options, addr: SocketAddr) -> Result<App, DashboardError> {
        let (changes, _) = broadcast::channel(256);
        let port = addr.port();
        let mut allowed_hosts = vec![addr.to_string()];
        if options.host.is_loopback() {
            allowed_hosts.extend([
                format!("localhost:{port}"),
                format!("127.0.0.1:{port}"),
                format!("[::1]:{port}"),
            ]);
        } else if options.host.is_unspecified() {
            // Bound to every interface (token required): any Host the client used.
            allowed_hosts.clear();
        }
        let (secret, token_file) = match &options.token {
            Some(t) => (t.clone(), None),
            None => {
                let owner = token::owner_token(&options.home)?;
                (owner.token, Some(owner.path))
            }
        };
        Ok(App {
            conductor: Conductor::new(&options.socket),
            learning_db: options.learning_db.clone(),
            env: environment()?,
            keys: Keys::new(&secret),
            token: secret,
            token_file,
            cookie_name: format!("mozart_session_{port}"),
            allowed_hosts,
            summaries: Mutex::new(HashMap::new()),
            changes,
            conductor_up: AtomicBool::new(false),
            flashes: Mutex::new(VecDeque::new()),
        })
    }

    /// Render a template; on failure (a defect) log it and name the template.
    fn render(&self, name: &str, ctx: JValue) -> Result<String, TemplateFailed> {
        self.env
            .get_template(name)
            .and_then(|t| t.render(ctx))
            .map_err(|e| {
                tracing::error!(template = name, error = %e, "dashboard template failed");
                TemplateFailed(name.to_string())
            })
    }

    fn page(
        &self,
        name: &str,
        page: &str,
        flash: Option<(&str, String)>,
        extra: JValue,
    ) -> Response {
        let ctx = context! {
            page => page,
            conductor_up => self.conductor_up.load(Ordering::Relaxed),
            flash => flash.as_ref().map(|f| f.1.clone()),
            flash_kind => flash.as_ref().map(|f| f.0.to_string()),
            ..extra
        };
        match self.render(name, ctx) {
            Ok(html) => Html(html).into_response(),
            Err(failed) => failed.into_response(),
        }
    }

    fn message(&self, status: StatusCode, title: &str, err: &OpError) -> Response {
        let mut resp = self.page(
            "message.html",
            "",
            None,
            context! { title => title, message => err.message.clone(), hints => err.hints.clone() },
        );
        *resp.status_mut() = status;
        resp
    }

    fn op_failure(&self, err: &OpError) -> Response {
        if err.conductor_down {
            self.conductor_up.store(false, Ordering::Relaxed);
            // Unreachable, or refused because another user controls the socket (issue 21).
            let title = if err.message == mozart_client::hints::NOT_RUNNING {
                "Conductor not running"
            } else {
                "Conductor not usable"
            };
            self.message(StatusCode::SERVICE_UNAVAILABLE, title, err)
        } else if err.message.starts_with("Score not found")
            || err.message.starts_with("Invalid score ID")
        {
            self.message(StatusCode::NOT_FOUND, "Score not found", err)
        } else {
            self.message(StatusCode::BAD_GATEWAY, "Conductor error", err)
        }
    }

    fn set_up(&self, up: bool) {
        self.conductor_up.store(up, Ordering::Relaxed);
    }

    fn push_flash(&self, kind: &'static str, text: String) -> String {
        let id = random_token()[..12].to_string();
        let mut f = lock(&self.flashes);
        if f.len() >= FLASH_LIMIT {
            f.pop_front();
        }
        f.push_back((id.clone(), kind, text));
        id
    }

    fn take_flash(&self, id: Option<&str>) -> Option<(&'static str, String)> {
        let id = id?;
        let mut f = lock(&self.flashes);
        let pos = f.iter().position(|(i, _, _)| i == id)?;
        f.remove(pos).map(|(_, k, t)| (k, t))
    }

    /// Refresh the summaries of active jobs (always) and of finished jobs not yet known:
    /// those the conductor has loaded from the progress its `job.list_page` gave with the
    /// rows (`given`), or — from a conductor that gives none — in one `job.progress` call;
    /// the rest (a job not loaded, or too large for it) with `job.status`, at most
    /// [`SUMMARY_FETCHES`] a render. One call instead of one per row: each call waits behind
    /// the sheet events of every running job, so 16 of them were most of the page's time
    /// with 1,000 jobs running (issue 24).
    async fn refresh_summaries(
        &self,
        jobs: &[JobListEntry],
        given: Option<std::collections::BTreeMap<String, JobProgress>>,
    ) {
        let mut wanted: Vec<(String, String)> = {
            let cache = lock(&self.summaries);
            jobs.iter()
                .filter_map(|j| {
                    let id = j.job_id().to_string();
                    let status = j.status().to_lowercase();
                    let finished = matches!(status.as_str(), "completed" | "failed" | "cancelled");
                    match cache.get(&id) {
                        Some((known, _)) if finished && *known == status => None,
                        _ => Some((id, status)),
                    }
                })
                .collect()
        };
        if wanted.is_empty() {
            return;
        }
        // The page's own progress, else `job.progress`; a conductor without either (or one
        // that fails it) leaves every row to `job.status`, as before.
        let progress = match given {
            Some(jobs) => Some(jobs),
            None => {
                let ids = wanted.iter().map(|(id, _)| id.clone()).collect();
                self.conductor.progress(ids).await.ok().map(|p| p.jobs)
            }
        };
        if let Some(progress) = progress {
            let mut cache = lock(&self.summaries);
            wanted.retain(|(id, status)| match progress.get(id) {
                Some(p) => {
                    let summary = JobSummary::from_progress(p.clone());
                    cache.insert(id.clone(), (status.clone(), summary));
                    false
                }
                None => true,
            });
        }
        wanted.truncate(SUMMARY_FETCHES);
        if wanted.is_empty() {
            return;
        }
        // A summary, not every sheet: a list row needs counts (issue 24).
        let query = SheetQuery::summary(PAGE_FULL_UP_TO);
        let fetched = futures_util::future::join_all(
            wanted
                .iter()
                .map(|(id, _)| self.conductor.status_view(id, &query)),
        )
        .await;
        let mut cache = lock(&self.summaries);
        for ((id, status), result) in wanted.into_iter().zip(fetched) {
            if let Some(cp) = result.as_ref().ok().and_then(JobDetail::checkpoint) {
                cache.insert(id, (status, JobSummary::of(cp)));
            }
        }
    }

    /// The jobs table rows (or the error to show in their place), how many jobs there are
    /// in all, the counts per status, and — when the page does not show every matching job
    /// — how many it shows of how many. One page, cut by the conductor (`job.list_page`,
    /// newest first, at most [`JOBS_PAGE`] rows): 1,000 running jobs cost the page what
    /// 100 do (issue 24).
    async fn rows(&self, filter: Option<&str>) -> RowsView {
        let params = mozart_ipc::types::ListPageParams {
            statuses: filter.map(|f| vec![f.to_string()]),
            limit: Some(JOBS_PAGE as u64),
            offset: 0,
            counts: true,
            progress: true,
        };
        match self.conductor.list_page(&params).await {
            Ok(page) => {
                self.set_up(true);
                let jobs = page.jobs.0;
                self.refresh_summaries(&jobs, page.progress).await;
                // The page's rows only: the cache keeps every job seen (1,000 and more).
                let sums: HashMap<String, JobSummary> = {
                    let cache = lock(&self.summaries);
                    jobs.iter()
                        .filter_map(|j| {
                            let id = j.job_id();
                            cache.get(id).map(|v| (id.to_string(), v.1.clone()))
                        })
                        .collect()
                };
                let rows = view::job_rows(&jobs, &sums, filter, mozart_ipc::time::epoch_now());
                let counts: Vec<(String, usize)> = view::STATUSES
                    .iter()
                    .map(|s| {
                        let n = page.counts.as_ref().and_then(|c| c.get(*s)).copied();
                        (
                            s.to_string(),
                            usize::try_from(n.unwrap_or(0)).unwrap_or(usize::MAX),
                        )
                    })
                    .collect();
                let all = page
                    .counts
                    .as_ref()
                    .map_or(page.total, |c| c.values().sum());
                let matching = usize::try_from(page.total).unwrap_or(usize::MAX);
                let more = (matching > rows.len()).then_some((rows.len(), matching));
                (
                    Ok(rows),
                    usize::try_from(all).unwrap_or(usize::MAX),
                    counts,
                    more,
                )
            }
            Err(e) => {
                if e.conductor_down {
                    self.set_up(false);
                }
                (Err(e), 0, view::status_counts(&[]), None)
            }
        }
    }

    fn rows_html(
        &self,
        rows: &Result<Vec<JobRow>, OpError>,
        filter: Option<&str>,
        total: usize,
        counts: &[(String, usize)],
        more: Option<(usize, usize)>,
    ) -> Result<String, TemplateFailed> {
        let (rows, error) = match rows {
            Ok(r) => (r.clone(), None),
            Err(e) => (Vec::new(), Some(e.clone())),
        };
        self.render(
            "jobs_live.html",
            context! {
                rows => rows, filter => filter, total => total, counts => counts, more => more,
                error => error.map(|e| context!{ message => e.message, hints => e.hints }),
            },
        )
    }

    /// Everything the job page shows, as a template context.
    async fn detail_ctx(&self, id: &str, query: &SheetQuery) -> Result<(JValue, bool), OpError> {
        let detail = self.conductor.status_view(id, query).await?;
        self.set_up(true);
        let now = mozart_ipc::time::epoch_now();
        let status = detail.status();
        let active = matches!(status.as_str(), "running" | "queued" | "paused");
        let workspace = detail.workspace().unwrap_or("").to_string();
        let (shown, label) = detail.shown_status();
        let mut ctx = DetailView {
            status: shown,
            label,
            workspace: workspace.clone(),
            config_path: detail.config_path().unwrap_or("").to_string(),
            error: detail.error_message().map(str::to_string),
            hooks: detail.hook_results().to_vec(),
            ..DetailView::default()
        };
        let (mut progress_svg, mut timeline_svg) = (String::new(), String::new());
        let mut running_sheet = false;
        if let Some(cp) = detail.checkpoint() {
            let sum = JobSummary::of(cp);
            ctx.has_checkpoint = true;
            ctx.waiting = cp.waiting_reason.clone();
            ctx.holds = cp.instrument_holds.iter().map(|h| h.describe()).collect();
            ctx.percent = (sum.done * 100 / sum.total.max(1)).min(100);
            ctx.progress = Some(format!("{}/{}", sum.done, sum.total));
            ctx.cost = Some(view::format_job_cost(sum.cost, sum.cost_confidence));
            ctx.tokens = Some(format!(
                "{} / {}",
                cp.total_input_tokens, cp.total_output_tokens
            ));
            let start = cp.started_at.as_ref().and_then(|t| t.to_epoch());
            let end = cp.completed_at.as_ref().and_then(|t| t.to_epoch());
            ctx.started = start.map(view::format_epoch);
            ctx.elapsed =
                start.map(|s| view::format_duration(end.filter(|_| !active).unwrap_or(now) - s));
            ctx.sheets = view::sheet_rows(cp);
            if let Some(v) = cp.sheets_view.as_ref() {
                (ctx.sheets_note, ctx.more_pages) = sheets_note(id, v);
            }
            // What `mozart errors` lists, from the same answer (`job.errors`): the page's
            // answer may hold only some sheets, and a trimmed history.
            ctx.attempts = match self.conductor.errors(id, false).await {
                Ok((errors, _)) => errors
                    .checkpoint()
                    .map(view::attempt_rows)
                    .unwrap_or_default(),
                Err(_) => view::attempt_rows(cp),
            };
            ctx.validations = view::validation_rows(cp);
            // A finished job's pictures end when it ended: a sheet a cancel stopped has no
            // end of its own, and drawn to "now" its bar (and the time axis) kept growing.
            let until = end.filter(|_| !active).unwrap_or(now);
            progress_svg = chart::progress(cp, until);
            timeline_svg = chart::timeline(cp, until);
            // The job's running sheets, not only those of the page shown.
            let running = view::running_sheets(&self.conductor, id, cp).await;
            running_sheet = !running.is_empty();
            if !workspace.is_empty() {
                ctx.logs = running
                    .iter()
                    .filter_map(|n| log_tail(Path::new(&workspace), id, *n))
                    .collect();
            }
        }
        let value = context! {
            d => JValue::from_serialize(&ctx),
            job_id => id,
            progress_svg => JValue::from_safe_string(progress_svg),
            timeline_svg => JValue::from_safe_string(timeline_svg),
        };
        Ok((value, running_sheet))
    }

    /// Same-origin and token checks of a state-changing request.
    fn check_write(
        &self,
        headers: &HeaderMap,
        visitor: &Visitor,
        form_token: Option<&str>,
    ) -> Result<(), OpError> {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let same = |url: &str| {
            url.strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"))
                .map(|rest| rest.split('/').next() == Some(host))
                .unwrap_or(false)
        };
        // `Origin: null` is what a browser sends for a form of a page with
        // `Referrer-Policy: no-referrer` (ours): no evidence either way, the session's form
        // token decides.
        let origin = headers
            .get(header::ORIGIN)
            .and_then(|h| h.to_str().ok())
            .filter(|o| *o != "null");
        let referer = headers.get(header::REFERER).and_then(|h| h.to_str().ok());
        let cross = match (origin, referer) {
            (Some(o), _) => !same(o),
            (None, Some(r)) => !same(r),
            (None, None) => false,
        };
        if cross {
            return Err(OpError::new(
                "Refused: this request came from another site (Origin/Referer does not match the dashboard).",
                &["Use the dashboard's own buttons."],
            ));
        }
        let Visitor::Session(nonce) = visitor else {
            // The access token itself came in a header, which no other site can make a
            // browser send.
            return Ok(());
        };
        let expected = self.keys.csrf(nonce);
        match form_token.map(str::to_string).or_else(|| header_token(headers)) {
            Some(t) if constant_eq(&t, &expected) => Ok(()),
            Some(_) => Err(OpError::new(
                "Refused: the dashboard token is wrong.",
                &["Reload the page and try again."],
            )),
            None => Err(OpError::new(
                "Refused: this request carries no dashboard token.",
                &["Use the dashboard's own buttons, or send the token in an X-Mozart-Token header."],
            )),
        }
    }

    /// The form token to put in `visitor`'s pages.
    fn csrf(&self, visitor: &Visitor) -> String {
        match visitor {
            Visitor::Session(nonce) => self.keys.csrf(nonce),
            Visitor::Header => String::new(),
        }
    }
}

/// Who a request comes from (the guard lets only these through).
#[derive(Debug, Clone)]
enum Visitor {
    /// A browser session (its cookie's nonce).
    Session(String),
    /// A client that sent the access token in a header.
    Header,
}

/// A template that failed to render (a defect): a short page, never a trace.
struct TemplateFailed(String);

impl IntoResponse for TemplateFailed {
    fn into_response(self) -> Response {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            Html(format!(
                "<h1>Dashboard error</h1><p>The page template {} could not be rendered. See the dashboard's log.</p>",
                chart::esc(&self.0)
            )),
        )
            .into_response()
    }
}

/// The job page's data.
#[derive(Debug, Default, Serialize)]
struct DetailView {
    status: String,
    label: String,
    has_checkpoint: bool,
    percent: u32,
    progress: Option<String>,
    cost: Option<String>,
    tokens: Option<String>,
    started: Option<String>,
    elapsed: Option<String>,
    workspace: String,
    config_path: String,
    error: Option<String>,
    /// What the job waits for, and the holds on its instruments (issue 22).
    waiting: Option<String>,
    holds: Vec<String>,
    sheets: Vec<view::SheetRow>,
    /// What the sheets table holds of a large job (issue 24), when not every sheet.
    sheets_note: Option<String>,
    /// Links to more sheets: (label, URL).
    more_pages: Vec<(String, String)>,
    attempts: Vec<view::AttemptRow>,
    validations: Vec<view::ValidationRow>,
    hooks: Vec<HookResult>,
    logs: Vec<LogTail>,
}

/// Sheets per page of a job page's sheet list (`?offset=N`, `?state=S`).
const SHEET_PAGE: u64 = 200;
/// A job page lists every sheet of a job of at most this many sheets.
const PAGE_FULL_UP_TO: u32 = 500;

/// The sheet query of a job page: a page when the URL asks for one, else the summary.
fn page_query(q: &FlashQuery) -> (SheetQuery, bool) {
    let state = q
        .state
        .as_deref()
        .map(|s| s.trim().to_lowercase())
        .filter(|s| mozart_ipc::sheet_view::STATES.contains(&s.as_str()));
    if state.is_some() || q.offset.is_some() {
        let query = SheetQuery {
            mode: SheetMode::Page,
            states: state.map(|s| vec![s]),
            offset: q.offset.unwrap_or(0),
            limit: Some(SHEET_PAGE),
            ..SheetQuery::default()
        };
        (query, true)
    } else {
        (SheetQuery::summary(PAGE_FULL_UP_TO), false)
    }
}

/// What a job page's sheet table holds when it is not every sheet, and links to the rest.
fn sheets_note(id: &str, v: &SheetsView) -> (Option<String>, Vec<(String, String)>) {
    let base = format!("/jobs/{}", url_segment(id));
    let counts: Vec<String> = v
        .shown_counts()
        .iter()
        .map(|(state, n)| format!("{n} {state}"))
        .collect();
    let mut links = Vec::new();
    let note = match v.mode {
        SheetMode::Summary if !v.truncated => return (None, links),
        SheetMode::Summary => {
            links.push((
                format!("every sheet, {SHEET_PAGE} at a time"),
                format!("{base}?offset=0"),
            ));
            for (state, _) in v.shown_counts() {
                links.push((format!("{state} only"), format!("{base}?state={state}")));
            }
            format!(
                "{} sheets ({}): showing the running and failed ones, at most {} of each.",
                v.total,
                counts.join(", "),
                v.cap.unwrap_or(0)
            )
        }
        SheetMode::Page => {
            let offset = v.offset.unwrap_or(0);
            let state = v.states.as_ref().and_then(|s| s.first()).cloned();
            let state_arg = state
                .as_deref()
                .map(|s| format!("state={s}&"))
                .unwrap_or_default();
            if offset > 0 {
                let prev = offset.saturating_sub(v.limit.unwrap_or(SHEET_PAGE));
                links.push((
                    "previous page".into(),
                    format!("{base}?{state_arg}offset={prev}"),
                ));
            }
            if let Some(next) = v.next_offset {
                links.push((
                    "next page".into(),
                    format!("{base}?{state_arg}offset={next}"),
                ));
            }
            links.push(("summary".into(), base.clone()));
            let matched = v.matched.unwrap_or(v.total);
            if v.returned == 0 && offset > 0 {
                // Past the last matching sheet: not "Sheets 99999–99999 of 1201".
                let links = vec![
                    ("first page".into(), format!("{base}?{state_arg}offset=0")),
                    ("summary".into(), base.clone()),
                ];
                return (
                    Some(format!(
                        "No sheets from position {offset}: {matched} match {} ({} sheets in the job: {}).",
                        state.as_deref().unwrap_or("any state"),
                        v.total,
                        counts.join(", ")
                    )),
                    links,
                );
            }
            format!(
                "Sheets {}–{} of {} matching {} ({} sheets in the job: {}).",
                offset + u64::from(v.returned.min(1)),
                offset + u64::from(v.returned),
                v.matched.unwrap_or(v.total),
                state.as_deref().unwrap_or("any state"),
                v.total,
                counts.join(", ")
            )
        }
    };
    (Some(note), links)
}

/// The end of a running sheet's output file.
#[derive(Debug, Serialize)]
struct LogTail {
    sheet: u32,
    path: String,
    text: String,
}

/// Tail of `{workspace}/logs/sheet-NN.stdout.log` (and its stderr), upstream's live files
/// (in `logs/{job_id}` when another job's are in `logs/`).
fn log_tail(workspace: &Path, job_id: &str, sheet: u32) -> Option<LogTail> {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = String::new();
    let mut shown = None;
    for suffix in ["stdout", "stderr"] {
        let path = mozart_ipc::paths::sheet_output_log(workspace, job_id, sheet, suffix);
        let Ok(mut file) = std::fs::File::open(&path) else {
            continue;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let start = len.saturating_sub(LOG_TAIL_BYTES);
        if file.seek(SeekFrom::Start(start)).is_err() {
            continue;
        }
        let mut buf = Vec::new();
        let _ = file.take(LOG_TAIL_BYTES).read_to_end(&mut buf);
        let mut chunk = String::from_utf8_lossy(&buf).into_owned();
        let mut skipped = start;
        if start > 0 {
            if let Some(nl) = chunk.find('\n') {
                skipped += (nl + 1) as u64;
                chunk.drain(..=nl);
            }
        }
        // Written redacted; redacted again for logs an older Mozart wrote (issue 21).
        let chunk = mozart_backends::redact::redact_owned(chunk);
        if !chunk.is_empty() {
            if suffix == "stderr" {
                text.push_str("--- stderr ---\n");
            }
            // Only the end is shown: say so, and where the whole is (as MCP `logs` does).
            if skipped > 0 {
                let noun = if skipped == 1 { "byte" } else { "bytes" };
                text.push_str(&format!(
                    "[{skipped} earlier {noun} not shown; the whole output: {}]\n",
                    path.display()
                ));
            }
            text.push_str(&chunk);
        }
        shown.get_or_insert(path.display().to_string());
    }
    let path = shown?;
    if text.is_empty() {
        text = "(no output yet)".into();
    }
    Some(LogTail { sheet, path, text })
}

fn header_token(headers: &HeaderMap) -> Option<String> {
    if let Some(t) = headers.get("x-mozart-token").and_then(|h| h.to_str().ok()) {
        return Some(t.to_string());
    }
    headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::to_string)
}

/// The value of the cookie `name`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(';'))
        .find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

fn random_token() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if !filled {
        // No /dev/urandom: mix the clock and pid (still unguessable enough for a CSRF token
        // on a loopback-only dashboard; a user-given token is required elsewhere).
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            ^ u128::from(std::process::id()) << 64;
        bytes = seed.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn environment() -> Result<Environment<'static>, DashboardError> {
    let mut env = Environment::new();
    for (name, source) in [
        ("base.html", include_str!("templates/base.html")),
        ("message.html", include_str!("templates/message.html")),
        ("jobs.html", include_str!("templates/jobs.html")),
        ("rows.html", include_str!("templates/rows.html")),
        ("jobs_live.html", include_str!("templates/jobs_live.html")),
        ("job.html", include_str!("templates/job.html")),
        ("detail.html", include_str!("templates/detail.html")),
        ("prompt.html", include_str!("templates/prompt.html")),
        ("validate.html", include_str!("templates/validate.html")),
        ("learning.html", include_str!("templates/learning.html")),
    ] {
        env.add_template(name, source)
            .map_err(|e| DashboardError::Template(format!("{name}: {e}")))?;
    }
    Ok(env)
}

/// Render the jobs page for `jobs` (a `job.list` answer) without a conductor: what the
/// benchmark times (the page's server-side cost with many jobs).
pub fn render_jobs_page_for_bench(jobs: &[JobListEntry]) -> Result<String, DashboardError> {
    let env = environment()?;
    let rows = view::job_rows(jobs, &HashMap::new(), None, mozart_ipc::time::epoch_now());
    env.get_template("jobs.html")
        .and_then(|t| {
            t.render(context! {
                page => "jobs", conductor_up => true,
                rows => rows, total => jobs.len(), counts => view::status_counts(jobs),
            })
        })
        .map_err(|e| DashboardError::Template(e.to_string()))
}

// ---------------------------------------------------------------------------------------
// The conductor's event stream.
// ---------------------------------------------------------------------------------------

/// Follow `daemon.monitor.stream`, announcing each job that changed; reconnect every second
/// while the conductor is away.
async fn watch_monitor(app: Arc<App>) {
    let mut was_up: Option<bool> = None;
    loop {
        let outcome = follow_stream(&app, &mut was_up).await;
        if was_up != Some(false) {
            was_up = Some(false);
            app.set_up(false);
            let _ = app.changes.send(Arc::from(""));
        }
        if let Err(e) = outcome {
            tracing::debug!(error = %e, "monitor stream unavailable");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn follow_stream(app: &App, was_up: &mut Option<bool>) -> std::io::Result<()> {
    let stream = mozart_ipc::connect_stream(app.conductor.socket(), Duration::from_secs(2))
        .await
        .map_err(std::io::Error::other)?;
    let (read, mut write) = stream.into_split();
    write
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"daemon.monitor.stream\",\"params\":{},\"id\":1}\n",
        )
        .await?;
    let mut lines = BufReader::new(read).lines();
    while let Some(line) = lines.next_line().await? {
        if *was_up != Some(true) {
            *was_up = Some(true);
            app.set_up(true);
            let _ = app.changes.send(Arc::from(""));
        }
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if msg.get("method").and_then(Value::as_str) != Some("monitor.event") {
            continue;
        }
        let params = msg.get("params").unwrap_or(&Value::Null);
        let params = params.get("result").unwrap_or(params);
        if params.get("event").and_then(Value::as_str) == Some("monitor.snapshot") {
            continue;
        }
        let job = params.get("job_id").and_then(Value::as_str).unwrap_or("");
        let _ = app.changes.send(Arc::from(job));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Routes.
// ---------------------------------------------------------------------------------------

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(jobs_page))
        .route("/jobs", get(jobs_page))
        .route("/jobs/{id}", get(job_page))
        .route("/jobs/{id}/sheets/{sheet}/prompt", get(prompt_page))
        .route("/jobs/{id}/{action}", post(job_action))
        .route("/events/jobs", get(jobs_events))
        .route("/events/jobs/{id}", get(job_events))
        .route(
            "/validate",
            get(validate_page)
                .post(validate_submit)
                .layer(axum::extract::DefaultBodyLimit::max(VALIDATE_BODY_LIMIT)),
        )
        .route("/learning", get(learning_page))
        .route("/static/app.js", get(app_js))
        .route("/static/style.css", get(style_css))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(app)
}

/// The policy every response carries: nothing but this origin's own files (no inline
/// script or style, no plugin, no other site), never inside a frame, forms only to us.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

/// Security headers on every response (pages, streams, refusals, redirects).
async fn security_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Pages hold the session's form token: never kept by a cache.
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    resp
}

async fn app_js() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/javascript; charset=utf-8"),
        )],
        JS,
    )
        .into_response()
}

async fn style_css() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/css; charset=utf-8"),
        )],
        CSS,
    )
        .into_response()
}

/// The answer to a request without the token or a session: nothing of the dashboard.
fn unauthorized() -> Response {
    let mut resp = (
        StatusCode::UNAUTHORIZED,
        Html(
            "<!doctype html><title>Token required</title><h1>Token required</h1>\
<p>This dashboard serves only its owner. Open the address <code>mozart dashboard</code> printed, \
<code>http://HOST:PORT/?token=&lt;TOKEN&gt;</code> (the token given with <code>--token</code>, or else \
the contents of <code>dashboard.token</code> in the Mozart home of the user who started it), \
or send <code>Authorization: Bearer &lt;TOKEN&gt;</code>.</p>",
        ),
    )
        .into_response();
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"mozart-dashboard\""),
    );
    resp
}

/// Host check, then the token on every request: a `?token=` visit (GET) is exchanged for
/// a session cookie and redirected without it; otherwise a genuine session cookie, or the
/// token in a header. Anything else is a 401 (pages, streams, actions, files alike).
async fn guard(
    State(app): State<Arc<App>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let headers = req.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if !app.allowed_hosts.is_empty() && !app.allowed_hosts.iter().any(|h| h == host) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "Refused: unexpected Host header (open the dashboard by the address it printed).",
        )
            .into_response();
    }
    if req.method() == axum::http::Method::GET {
        if let Some(resp) = login(&app, req.uri()) {
            return resp;
        }
    }
    // The access token in a header first: a script that also holds a cookie is still the
    // token's holder, whatever its cookie's session.
    let visitor = if header_token(headers).is_some_and(|t| app.keys.is_token(&t)) {
        Visitor::Header
    } else if let Some(nonce) =
        cookie(headers, &app.cookie_name).and_then(|v| app.keys.check_session(v))
    {
        Visitor::Session(nonce.to_string())
    } else {
        return unauthorized();
    };
    req.extensions_mut().insert(visitor);
    next.run(req).await
}

/// A GET carrying the right `token=`: a new session cookie, and a redirect to the same
/// address without the token (out of the address bar and the history).
fn login(app: &App, uri: &axum::http::Uri) -> Option<Response> {
    let query = uri.query()?;
    let given = query.split('&').find_map(|kv| kv.strip_prefix("token="))?;
    if !app.keys.is_token(given) {
        return None;
    }
    let nonce = match token::random_hex(16) {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, "dashboard: no random bytes for a session");
            return Some(
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "The dashboard cannot start a session: reading /dev/urandom failed.",
                )
                    .into_response(),
            );
        }
    };
    let rest: Vec<&str> = query
        .split('&')
        .filter(|kv| !kv.starts_with("token=") && !kv.is_empty())
        .collect();
    let target = if rest.is_empty() {
        uri.path().to_string()
    } else {
        format!("{}?{}", uri.path(), rest.join("&"))
    };
    let mut resp = Redirect::to(&target).into_response();
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/",
        app.cookie_name,
        app.keys.session(&nonce)
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    Some(resp)
}

async fn not_found(State(app): State<Arc<App>>) -> Response {
    app.message(
        StatusCode::NOT_FOUND,
        "Page not found",
        &OpError::new("There is no such page.", &["Start from the jobs list."]),
    )
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    status: Option<String>,
    flash: Option<String>,
}

fn clean_filter(status: Option<&str>) -> Option<String> {
    let s = status?.to_lowercase();
    view::STATUSES.contains(&s.as_str()).then_some(s)
}

/// The page saying a job list's `?status=` is not a status (it was ignored: every job shown
/// under an address that asked for some).
fn unknown_status(app: &App, status: Option<&str>) -> Option<Response> {
    let s = status.filter(|s| !s.is_empty())?;
    clean_filter(Some(s)).is_none().then(|| {
        app.message(
            StatusCode::BAD_REQUEST,
            "Unknown status",
            &OpError::new(
                format!("Unknown status '{s}'."),
                &[&format!("Use one of: {}.", view::STATUSES.join(", "))],
            ),
        )
    })
}

async fn jobs_page(State(app): State<Arc<App>>, Query(q): Query<ListQuery>) -> Response {
    if let Some(page) = unknown_status(&app, q.status.as_deref()) {
        return page;
    }
    let filter = clean_filter(q.status.as_deref());
    let (rows, total, counts, more) = app.rows(filter.as_deref()).await;
    let (rows, error) = match rows {
        Ok(r) => (r, None),
        Err(e) => (
            Vec::new(),
            Some(context! { message => e.message, hints => e.hints }),
        ),
    };
    let flash = app.take_flash(q.flash.as_deref());
    app.page(
        "jobs.html",
        "jobs",
        flash,
        context! { rows => rows, error => error, filter => filter, total => total, counts => counts, more => more },
    )
}

#[derive(Debug, Deserialize)]
struct FlashQuery {
    flash: Option<String>,
    /// Job page: list only sheets in this state, a page at a time.
    state: Option<String>,
    /// Job page: the page of sheets starting here.
    offset: Option<u64>,
}

/// A job page's address as typed: checked before use, so a wrong one is said, not a
/// framework's "Failed to deserialize query string" in plain text nor silently ignored.
#[derive(Debug, Deserialize)]
struct RawJobQuery {
    flash: Option<String>,
    state: Option<String>,
    offset: Option<String>,
}

impl RawJobQuery {
    fn check(self) -> Result<FlashQuery, OpError> {
        let offset = match self.offset.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(o) => Some(o.parse::<u64>().map_err(|_| {
                OpError::new(
                    format!("offset '{o}' is not a sheet position: a whole number, 0 or more."),
                    &["Use ?offset=0 for the first page of sheets."],
                )
            })?),
        };
        let state = self.state.filter(|s| !s.trim().is_empty());
        if let Some(s) = &state {
            if !mozart_ipc::sheet_view::STATES.contains(&s.trim().to_lowercase().as_str()) {
                return Err(OpError::new(
                    format!("Unknown sheet state '{s}'."),
                    &[&format!(
                        "Use one of: {}.",
                        mozart_ipc::sheet_view::STATES.join(", ")
                    )],
                ));
            }
        }
        Ok(FlashQuery {
            flash: self.flash,
            state,
            offset,
        })
    }
}

async fn job_page(
    State(app): State<Arc<App>>,
    Extension(visitor): Extension<Visitor>,
    UrlPath(id): UrlPath<String>,
    Query(raw): Query<RawJobQuery>,
) -> Response {
    let q = match raw.check() {
        Ok(q) => q,
        Err(e) => return app.message(StatusCode::BAD_REQUEST, "Bad address", &e),
    };
    let flash = app.take_flash(q.flash.as_deref());
    let (query, paged) = page_query(&q);
    match app.detail_ctx(&id, &query).await {
        // A page of sheets stays as asked: the live refresh shows the summary.
        Ok((ctx, _)) => app.page(
            "job.html",
            "jobs",
            flash,
            context! { job_id => id, csrf => app.csrf(&visitor), paged => paged, ..ctx },
        ),
        Err(e) => app.op_failure(&e),
    }
}

async fn prompt_page(
    State(app): State<Arc<App>>,
    UrlPath((id, sheet)): UrlPath<(String, String)>,
) -> Response {
    let Ok(sheet) = sheet.parse::<u32>() else {
        return app.message(
            StatusCode::NOT_FOUND,
            "No such sheet",
            &OpError::new(format!("'{sheet}' is not a sheet number."), &[]),
        );
    };
    let detail = match app.conductor.status(&id).await {
        Ok(d) => d,
        Err(e) => return app.op_failure(&e),
    };
    let score_path = detail.config_path().unwrap_or("").to_string();
    let workspace = detail.workspace().map(PathBuf::from);
    let path = PathBuf::from(&score_path);
    let rendered = tokio::task::spawn_blocking(move || render_prompt(&path, workspace, sheet))
        .await
        .unwrap_or_else(|_| Err(OpError::new("The prompt renderer stopped.", &[])));
    match rendered {
        Ok(prompt) => app.page(
            "prompt.html",
            "jobs",
            None,
            context! { job_id => id, sheet => sheet, prompt => prompt, score_path => score_path },
        ),
        Err(e) => app.message(StatusCode::UNPROCESSABLE_ENTITY, "Prompt not available", &e),
    }
}

/// Render sheet `num`'s prompt template from the score file (as it is now).
fn render_prompt(score: &Path, workspace: Option<PathBuf>, num: u32) -> Result<String, OpError> {
    if score.as_os_str().is_empty() || !score.is_file() {
        return Err(OpError::new(
            format!(
                "The score file {} is not readable any more.",
                score.display()
            ),
            &[],
        ));
    }
    let loaded = mozart_config::load_score(score)
        .map_err(|e| OpError::new(format!("The score no longer loads: {e}"), &[]))?;
    let plan = mozart_config::SheetPlan::build(&loaded.config)
        .map_err(|e| OpError::new(e.to_string(), &[]))?;
    let sheet = plan
        .sheets
        .iter()
        .find(|s| s.num == num)
        .ok_or_else(|| OpError::new(format!("The score has no sheet {num}."), &[]))?;
    let ctx = mozart_config::RenderContext {
        workspace,
        template_dir: score.parent().map(Path::to_path_buf),
        ..Default::default()
    };
    mozart_config::template::render_prompt(&loaded.config, sheet, &ctx)
        .map_err(|e| OpError::new(e.to_string(), &[]))
}

#[derive(Debug, Deserialize)]
struct TokenForm {
    token: Option<String>,
}

async fn job_action(
    State(app): State<Arc<App>>,
    Extension(visitor): Extension<Visitor>,
    UrlPath((id, action)): UrlPath<(String, String)>,
    headers: HeaderMap,
    form: Result<Form<TokenForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let token = form.as_ref().ok().and_then(|f| f.token.clone());
    if let Err(e) = app.check_write(&headers, &visitor, token.as_deref()) {
        return app.message(StatusCode::FORBIDDEN, "Request refused", &e);
    }
    let result = match action.as_str() {
        "pause" => app.conductor.pause(&id).await,
        "resume" => app.conductor.resume(&id).await,
        "cancel" => app.conductor.cancel(&id).await,
        _ => {
            return app.message(
                StatusCode::NOT_FOUND,
                "Unknown action",
                &OpError::new(format!("'{action}' is not pause, resume or cancel."), &[]),
            )
        }
    };
    let flash = match result {
        Ok(text) => app.push_flash("ok", text),
        Err(e) if e.conductor_down => return app.op_failure(&e),
        Err(e) => {
            let mut text = match &e.code {
                Some(c) if c != "job" => format!("Error [{c}]: {}", e.message),
                _ => format!("Error: {}", e.message),
            };
            for h in &e.hints {
                text.push_str(" — ");
                text.push_str(h);
            }
            app.push_flash("error", text)
        }
    };
    let _ = app.changes.send(Arc::from(id.as_str()));
    let target = format!("/jobs/{}?flash={flash}", url_segment(&id));
    Redirect::to(&target).into_response()
}

fn url_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn validate_page(
    State(app): State<Arc<App>>,
    Extension(visitor): Extension<Visitor>,
) -> Response {
    app.page(
        "validate.html",
        "validate",
        None,
        context! { yaml => "", csrf => app.csrf(&visitor) },
    )
}

#[derive(Debug, Deserialize)]
struct ValidateForm {
    token: Option<String>,
    yaml: Option<String>,
}

/// Most bytes of a posted validate form: a score at its limit
/// ([`validate::MAX_SCORE_BYTES`]) URL-encoded (up to 3 bytes a byte), and the token.
const VALIDATE_BODY_LIMIT: usize = 3 * validate::MAX_SCORE_BYTES + 64 * 1024;

async fn validate_submit(
    State(app): State<Arc<App>>,
    Extension(visitor): Extension<Visitor>,
    headers: HeaderMap,
    form: Result<Form<ValidateForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let form = match form {
        Ok(Form(form)) => form,
        // Over the body limit: the size said, as for a score over the limit of scores.
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return app.message(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Score too large",
                &OpError::new(
                    format!(
                        "The form is more than {VALIDATE_BODY_LIMIT} bytes, so it was not read; a score of at most {} bytes is accepted here.",
                        validate::MAX_SCORE_BYTES
                    ),
                    &["Validate a large score with: mozart validate <file>"],
                ),
            );
        }
        Err(e) => {
            return app.message(
                StatusCode::BAD_REQUEST,
                "Unreadable form",
                &OpError::new(
                    format!("The form could not be read: {}", e.body_text()),
                    &["Paste a score and press Validate."],
                ),
            );
        }
    };
    // Validation changes nothing, but it costs work: same rules as writes.
    if let Err(e) = app.check_write(&headers, &visitor, form.token.as_deref()) {
        return app.message(StatusCode::FORBIDDEN, "Request refused", &e);
    }
    let yaml = form.yaml.unwrap_or_default();
    let text = yaml.clone();
    // From the posted text alone: the dashboard may run with more rights than its visitor,
    // so no file the score names is read (issue 21).
    let report = tokio::task::spawn_blocking(move || validate::validate_posted(&text)).await;
    match report {
        Ok(report) => app.page(
            "validate.html",
            "validate",
            None,
            context! {
                yaml => yaml,
                report => JValue::from_serialize(&report),
                csrf => app.csrf(&visitor),
            },
        ),
        Err(_) => app.message(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Validation failed",
            &OpError::new(
                "The validator stopped unexpectedly on this score.",
                &["Try mozart validate <file> for details."],
            ),
        ),
    }
}

async fn learning_page(State(app): State<Arc<App>>) -> Response {
    let db = app.learning_db.clone();
    let view = tokio::task::spawn_blocking(move || learning::read(&db)).await;
    let view = match view {
        Ok(v) => v,
        Err(_) => learning::LearningView {
            missing: false,
            error: Some("Reading the learning database stopped unexpectedly.".into()),
            patterns: Vec::new(),
            entropy: None,
        },
    };
    let svg = view
        .entropy
        .as_ref()
        .map(|e| chart::entropy(&e.history))
        .unwrap_or_default();
    app.page(
        "learning.html",
        "learning",
        None,
        context! {
            l => JValue::from_serialize(&view),
            db => app.learning_db.display().to_string(),
            entropy_svg => JValue::from_safe_string(svg),
        },
    )
}

// ---------------------------------------------------------------------------------------
// Live streams.
// ---------------------------------------------------------------------------------------

/// What a live stream remembers between events.
struct Live {
    app: Arc<App>,
    rx: broadcast::Receiver<Arc<str>>,
    job: Option<String>,
    filter: Option<String>,
    last_html: String,
    last_up: Option<bool>,
    first: bool,
    queue: VecDeque<Event>,
}

impl Live {
    /// Wait for a change that concerns this stream (or the refresh period).
    async fn wait(&mut self, period: Duration) {
        let deadline = tokio::time::sleep(period);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                _ = &mut deadline => return,
                got = self.rx.recv() => match got {
                    Ok(id) => {
                        let concerns = id.is_empty() || self.job.as_deref().is_none_or(|j| j == &*id);
                        if concerns {
                            // Coalesce a burst (a fan-out finishing) into one render.
                            while self.rx.try_recv().is_ok() {}
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        deadline.as_mut().await;
                        return;
                    }
                }
            }
        }
    }

    /// Render this stream's fragment; the refresh period that fits what it shows.
    async fn render(&mut self) -> Duration {
        let (html, up, period) = match &self.job {
            None => {
                let (rows, total, counts, more) = self.app.rows(self.filter.as_deref()).await;
                let up = !matches!(&rows, Err(e) if e.conductor_down);
                let html = self
                    .app
                    .rows_html(&rows, self.filter.as_deref(), total, &counts, more)
                    .unwrap_or_default();
                (html, up, IDLE_REFRESH)
            }
            Some(id) => match self
                .app
                .detail_ctx(id, &SheetQuery::summary(PAGE_FULL_UP_TO))
                .await
            {
                Ok((ctx, running)) => {
                    let html = self.app.render("detail.html", ctx).unwrap_or_default();
                    (
                        html,
                        true,
                        if running {
                            RUNNING_REFRESH
                        } else {
                            IDLE_REFRESH
                        },
                    )
                }
                Err(e) => {
                    let html = format!(
                        "<div class=\"error-box\"><p class=\"message\">{}</p>{}</div>",
                        chart::esc(&e.message),
                        e.hints
                            .iter()
                            .map(|h| format!("<p class=\"hint\">{}</p>", chart::esc(h)))
                            .collect::<String>()
                    );
                    (html, !e.conductor_down, IDLE_REFRESH)
                }
            },
        };
        if self.last_up != Some(up) {
            self.last_up = Some(up);
            self.queue
                .push_back(Event::default().event("conductor").data(if up {
                    "up"
                } else {
                    "down"
                }));
        }
        if html != self.last_html {
            self.queue
                .push_back(Event::default().event("html").data(&html));
            self.last_html = html;
        }
        period
    }
}

fn live_stream(live: Live) -> impl Stream<Item = Result<Event, std::convert::Infallible>> {
    futures_util::stream::unfold((live, IDLE_REFRESH), |(mut live, mut period)| async move {
        loop {
            if let Some(event) = live.queue.pop_front() {
                return Some((Ok(event), (live, period)));
            }
            if live.first {
                // Render at once: whatever changed between the page load and this stream's
                // start reaches the page now, not at the next event.
                live.first = false;
            } else {
                live.wait(period).await;
            }
            period = live.render().await;
        }
    })
}

fn new_live(app: Arc<App>, job: Option<String>, filter: Option<String>) -> Live {
    Live {
        rx: app.changes.subscribe(),
        app,
        job,
        filter,
        last_html: String::new(),
        last_up: None,
        first: true,
        queue: VecDeque::new(),
    }
}

async fn jobs_events(
    State(app): State<Arc<App>>,
    Query(q): Query<ListQuery>,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    let filter = clean_filter(q.status.as_deref());
    Sse::new(live_stream(new_live(app, None, filter))).keep_alive(KeepAlive::default())
}

async fn job_events(
    State(app): State<Arc<App>>,
    UrlPath(id): UrlPath<String>,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    Sse::new(live_stream(new_live(app, Some(id), None))).keep_alive(KeepAlive::default())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_jobs_page_escapes_what_the_conductor_says() {
        let jobs: Vec<JobListEntry> = serde_json::from_value(json!([{
            "job_id": "<script>x</script>", "status": "running", "config_path": "/x.yaml",
            "workspace": "/w", "submitted_at": 1.0, "started_at": null
        }]))
        .unwrap();
        let html = render_jobs_page_for_bench(&jobs).unwrap();
        assert!(!html.contains("<script>x</script>"));
        assert!(html.contains("&lt;script&gt;"));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_eq("abc", "abc"));
        assert!(!constant_eq("abc", "abd"));
        assert!(!constant_eq("abc", "ab"));
        assert_eq!(random_token().len(), 32);
    }

    #[test]
    fn a_running_sheets_output_is_tailed_from_upstreams_log_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        std::fs::write(
            dir.path().join("logs/sheet-03.stdout.log"),
            "hello\nworld\n",
        )
        .unwrap();
        let tail = log_tail(dir.path(), "j", 3).unwrap();
        assert_eq!(tail.text, "hello\nworld\n");
        assert!(log_tail(dir.path(), "j", 4).is_none());
    }
}
