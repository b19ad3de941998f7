//! The `job.*` JSON-RPC methods (conductor.md §8.1–§8.12), delegating to the [`JobManager`].

use std::sync::Arc;

use mozart_ipc::types::{
    CancelResult, ClearParams, ClearResult, HistoryParams, JobIdParams, JobRequest, JobResponse,
    JobResponseStatus, ModifyParams, PauseResult, ResumeParams,
};
use mozart_ipc::{methods, parse_params, ErrorObjectOwned, RpcError, RpcModule};
use serde_json::{json, Value};

use super::{lock, JobError, JobManager, SubmitRequest};
use crate::{ConductorCtx, ConductorError};

type Ctx = Arc<ConductorCtx>;
type RpcResult = Result<Value, ErrorObjectOwned>;

fn to_value<T: serde::Serialize>(value: T) -> RpcResult {
    serde_json::to_value(value).map_err(|err| RpcError::internal(err).into())
}

fn job_error(e: JobError) -> ErrorObjectOwned {
    match e {
        JobError::NotFound(_) => RpcError::job_not_found(e.to_string()).into(),
        JobError::Registry(err) => RpcError::internal(err).into(),
    }
}

fn rejected(job_id: &str, message: impl Into<String>) -> JobResponse {
    JobResponse {
        job_id: job_id.to_string(),
        status: JobResponseStatus::Rejected,
        message: Some(message.into()),
    }
}

/// Register every `job.*` method of conductor.md §8, served by `mgr`.
pub fn register(module: &mut RpcModule<Ctx>, mgr: JobManager) -> Result<(), ConductorError> {
    let reg = |err: mozart_ipc::jsonrpsee::core::RegisterMethodError| {
        ConductorError::Register(err.to_string())
    };

    let m = mgr.clone();
    module
        .register_async_method(methods::JOB_SUBMIT, move |params, ctx, _| {
            let m = m.clone();
            async move {
                let p: JobRequest = parse_params(&params).map_err(ErrorObjectOwned::from)?;
                let req = SubmitRequest {
                    config_path: p.config_path,
                    workspace: p.workspace,
                    fresh: p.fresh,
                    start_sheet: p.start_sheet,
                    self_healing: p.self_healing,
                    chain_depth: p.chain_depth,
                    resume_of: None,
                    parent_job_id: None,
                    no_reload: false,
                };
                to_value(m.submit(&ctx, req).await)
            }
        })
        .map_err(reg)?;

    let m = mgr.clone();
    module
        .register_method(methods::JOB_STATUS, move |params, _, _| {
            let p: JobIdParams = parse_params(&params).map_err(ErrorObjectOwned::from)?;
            m.status(&p.job_id).map_err(job_error)
        })
        .map_err(reg)?;

    let m = mgr.clone();
    module
        .register_method(methods::JOB_PAUSE, move |params, _, _| {
            let p: JobIdParams = parse_params(&params).map_err(ErrorObjectOwned::from)?;
            to_value(match m.pause(&p.job_id) {
                Ok(()) => PauseResult {
                    paused: true,
                    error: None,
                },
                Err(e) => PauseResult {
                    paused: false,
                    error: Some(e),
                },
            })
        })
        .map_err(reg)?;

    let m = mgr.clone();
    module
        .register_async_method(methods::JOB_RESUME, move |params, ctx, _| {
            let m = m.clone();
            async move {
                let p: ResumeParams = parse_params(&params).map_err(ErrorObjectOwned::from)?;
                let ws = p.workspace.filter(|w| !w.is_empty());
                to_value(
                    m.resume(&ctx, &p.job_id, p.config_path, ws, p.no_reload)
                        .await,
                )
            }
        })
        .map_err(reg)?;

    let m = mgr.clone();
    module
        .register_async_method(methods::JOB_MODIFY, move |params, ctx, _| {
            let m = m.clone();
            async move {
                let p: ModifyParams = parse_params(&params).map_err(ErrorObjectOwned::from)?;
                let Some(config) = p.config_path.filter(|c| !c.is_empty()) else {
                    return to_value(rejected(&p.job_id, "config_path required"));
                };
                let ws = p.workspace.filter(|w| !w.is_empty());
                to_value(m.modify(&ctx, &p.job_id, config, ws).await)
            }
        })
        .map_err(reg)?;

    let m = mgr.clone();
    module
        .register_method(methods::JOB_CANCEL, move |params, _, _| {
            let p: JobIdParams = parse_params(&params).map_err(ErrorObjectOwned::from)?;
            to_value(CancelResult {
                cancelled: m.cancel(&p.job_id),
            })
        })
        .map_err(reg)?;

    let m = mgr.clone();
    module
        .register_method(methods::JOB_LIST, move |_, _, _| {
            m.list().map(Value::from).map_err(job_error)
        })
        .map_err(reg)?;

    let m = mgr.clone();
    module
        .register_method(methods::JOB_CLEAR, move |params, _, _| {
            let p: ClearParams = parse_params(&params).map_err(ErrorObjectOwned::from)?;
            let deleted = m
                .clear(p.statuses, p.older_than_seconds, p.job_ids)
                .map_err(job_error)?;
            to_value(ClearResult { deleted })
        })
        .map_err(reg)?;

    for name in [
        methods::JOB_ERRORS,
        methods::JOB_DIAGNOSE,
        methods::JOB_RECOVER,
    ] {
        let m = mgr.clone();
        module
            .register_method(name, move |params, _, _| {
                let p: JobIdParams = parse_params(&params).map_err(ErrorObjectOwned::from)?;
                let state = m.status(&p.job_id).map_err(job_error)?;
                let workspace = state.get("workspace").cloned().unwrap_or(Value::Null);
                RpcResult::Ok(match name {
                    methods::JOB_ERRORS => json!({ "state": state }),
                    methods::JOB_DIAGNOSE => json!({ "state": state, "workspace": workspace }),
                    _ => json!({ "state": state, "workspace": workspace, "dry_run": true, "sheet_num": null }),
                })
            })
            .map_err(reg)?;
    }

    let m = mgr;
    module
        .register_method(methods::JOB_HISTORY, move |params, _, _| {
            let p: HistoryParams = parse_params(&params).map_err(ErrorObjectOwned::from)?;
            let limit = if p.limit == 0 { 50 } else { p.limit };
            let registry = lock(&m.shared.registry);
            if registry
                .get_job(&p.job_id)
                .map_err(|e| job_error(e.into()))?
                .is_none()
            {
                return Err(job_error(JobError::NotFound(p.job_id)));
            }
            let rows = registry
                .attempts(&p.job_id, p.sheet_num, limit as usize)
                .map_err(|e| job_error(e.into()))?;
            let records: Vec<Value> = rows.iter().map(|r| r.to_history_json()).collect();
            // The registry records every attempt, so history always exists (possibly empty).
            Ok(json!({ "job_id": p.job_id, "has_history": true, "records": records }))
        })
        .map_err(reg)?;
    Ok(())
}
