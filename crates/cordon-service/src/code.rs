//! Code cells in stateful contexts (the kernels themselves are in [`crate::interpreter`]).

use std::time::Instant;

use serde_json::json;
use tokio::sync::mpsc;

use super::requests::{at_most, duration};
use super::{Caller, Service};
use crate::error::ServiceError;

/// How [`Service::end_context`] ends a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContextEnd {
    /// Stop the kernel; the context stays and its next cell starts a fresh kernel.
    Restart,
    /// Stop the kernel and forget the context.
    Delete,
}

impl Service {
    /// Runs a code cell in a stateful context (see [`crate::interpreter`]).
    pub async fn run_code(
        &self,
        caller: &Caller,
        id: &str,
        req: crate::interpreter::CodeRequest,
        events: Option<mpsc::Sender<crate::interpreter::CellEvent>>,
    ) -> Result<crate::interpreter::CodeResult, ServiceError> {
        self.run_code_in(caller, id, req, events, None).await
    }

    /// [`Self::run_code`]; a context this creates has its kernel start in `cwd`.
    pub async fn run_code_in(
        &self,
        caller: &Caller,
        id: &str,
        req: crate::interpreter::CodeRequest,
        events: Option<mpsc::Sender<crate::interpreter::CellEvent>>,
        cwd: Option<&str>,
    ) -> Result<crate::interpreter::CodeResult, ServiceError> {
        let live = self.get_live(caller, id)?;
        let language = crate::interpreter::normalize_language(&req.language)?;
        let context = req.context.clone().unwrap_or_else(|| "default".into());
        crate::types::check_env(&req.env)?;
        let timeout = match &req.timeout {
            Some(t) => duration(t, "timeout")?,
            None => live.profile.limits.timeout,
        };
        at_most(timeout, self.cfg.max_exec_timeout, "timeout")?;
        let slot = live.contexts.slot_in(language, &context, cwd)?;
        self.audit.record(
            "sandbox.code",
            &caller.key_id,
            Some(id),
            json!({"language": language, "context": context, "bytes": req.code.len()}),
        );
        let t0 = Instant::now();
        let r = crate::interpreter::run_cell(
            &live,
            &slot,
            &req.code,
            &req.env,
            timeout,
            req.plain_strings,
            events,
        )
        .await;
        self.metrics
            .observe_exec(t0.elapsed().as_secs_f64() * 1000.0);
        r
    }

    pub fn list_contexts(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<Vec<crate::interpreter::ContextInfo>, ServiceError> {
        Ok(self.get_live(caller, id)?.contexts.list())
    }

    pub async fn create_context(
        &self,
        caller: &Caller,
        id: &str,
        language: &str,
        name: &str,
    ) -> Result<crate::interpreter::ContextInfo, ServiceError> {
        self.create_context_in(caller, id, language, name, None)
            .await
    }

    /// [`Self::create_context`] with its kernel started in `cwd`.
    pub async fn create_context_in(
        &self,
        caller: &Caller,
        id: &str,
        language: &str,
        name: &str,
        cwd: Option<&str>,
    ) -> Result<crate::interpreter::ContextInfo, ServiceError> {
        let live = self.get_live(caller, id)?;
        let language = crate::interpreter::normalize_language(language)?;
        let slot = live.contexts.slot_in(language, name, cwd)?;
        crate::interpreter::ensure_started(&live, &slot).await?;
        self.audit.record(
            "sandbox.context.create",
            &caller.key_id,
            Some(id),
            json!({"language": language, "context": name}),
        );
        Ok(crate::interpreter::ContextInfo {
            language: language.into(),
            name: name.into(),
            execution_count: 0,
            alive: true,
            cwd: cwd.unwrap_or("/workspace").to_string(),
        })
    }

    /// Stops a context's kernel: a restart keeps the context (its next cell starts a fresh
    /// kernel), a delete also forgets it.
    pub async fn end_context(
        &self,
        caller: &Caller,
        id: &str,
        language: &str,
        name: &str,
        how: ContextEnd,
    ) -> Result<(), ServiceError> {
        let remove = how == ContextEnd::Delete;
        let live = self.get_live(caller, id)?;
        let language = crate::interpreter::normalize_language(language)?;
        let slot = if remove {
            live.contexts.remove(language, name)
        } else {
            live.contexts.get(language, name)
        }
        .ok_or_else(|| ServiceError::not_found(format!("no {language} context '{name}'")))?;
        crate::interpreter::stop(&live, &slot).await;
        let event = if remove {
            "sandbox.context.delete"
        } else {
            "sandbox.context.restart"
        };
        self.audit.record(
            event,
            &caller.key_id,
            Some(id),
            json!({"language": language, "context": name}),
        );
        Ok(())
    }
}
