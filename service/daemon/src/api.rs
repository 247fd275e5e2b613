//! The local API's handler: each request goes to the engine's use case of the same name. What
//! is the binary's own stays here: the version, the updater, and who may see the runner
//! environment's values (the server's access rules).

use rm_engine::Engine;
use rm_proto::{
    ApiError, CredentialPut, DoctorReport, Handler, HostAdmission, HostAdmissionChange,
    HostCapacity, HostEnv, HostEnvChange, HostStatus, PauseState, Peer, SignInSession, SignInStart,
    Status, TargetAdd, TargetRef, TargetStatus, TargetUpdate, WatchStart,
};
use std::sync::Arc;

#[derive(Clone)]
pub struct Api {
    /// The server's access rules: who may see the runner environment's values.
    pub access: rm_proto::AccessPolicy,
    pub engine: Engine,
    pub updater: Arc<crate::update::Updater>,
}

impl Handler for Api {
    fn service_version(&self) -> String {
        crate::VERSION.to_string()
    }

    async fn status(&self, _peer: Peer) -> Result<Status, ApiError> {
        self.engine.status().await
    }

    async fn watch(&self, _peer: Peer) -> Result<WatchStart, ApiError> {
        self.engine.watch().await
    }

    async fn put_credential(&self, peer: Peer, c: CredentialPut) -> Result<(), ApiError> {
        self.engine.put_credential(peer, c).await
    }

    async fn delete_credential(&self, peer: Peer) -> Result<(), ApiError> {
        self.engine.delete_credential(peer).await
    }

    async fn targets(&self, _peer: Peer) -> Result<Vec<TargetStatus>, ApiError> {
        self.engine.targets().await
    }

    async fn add_target(&self, peer: Peer, req: TargetAdd) -> Result<TargetStatus, ApiError> {
        self.engine.add_target(peer, req).await
    }

    async fn update_target(
        &self,
        peer: Peer,
        target: TargetRef,
        req: TargetUpdate,
    ) -> Result<TargetStatus, ApiError> {
        self.engine.update_target(peer, target, req).await
    }

    async fn remove_target(&self, peer: Peer, target: TargetRef) -> Result<(), ApiError> {
        self.engine.remove_target(peer, target).await
    }

    async fn set_host_capacity(
        &self,
        peer: Peer,
        req: HostCapacity,
    ) -> Result<HostStatus, ApiError> {
        self.engine.set_host_capacity(peer, req).await
    }

    async fn set_host_admission(
        &self,
        peer: Peer,
        change: HostAdmissionChange,
    ) -> Result<HostAdmission, ApiError> {
        self.engine.set_host_admission(peer, change).await
    }

    async fn host_env(&self, peer: Peer) -> Result<HostEnv, ApiError> {
        let operator = self.access.may_change(&peer.identity());
        self.engine.host_env(operator).await
    }

    async fn change_host_env(
        &self,
        peer: Peer,
        change: HostEnvChange,
    ) -> Result<HostEnv, ApiError> {
        self.engine.change_host_env(peer, change).await
    }

    async fn caches(&self, _peer: Peer) -> Result<rm_proto::CachesReport, ApiError> {
        self.engine.caches().await
    }

    async fn clear_caches(
        &self,
        peer: Peer,
        req: rm_proto::CacheClear,
    ) -> Result<rm_proto::CacheCleared, ApiError> {
        self.engine.clear_caches(peer, req).await
    }

    async fn set_host_caches(
        &self,
        peer: Peer,
        req: rm_proto::HostCachesChange,
    ) -> Result<rm_proto::CachesReport, ApiError> {
        self.engine.set_host_caches(peer, req).await
    }

    async fn host_doctor(&self, _peer: Peer) -> Result<DoctorReport, ApiError> {
        self.engine.host_doctor().await
    }

    async fn pool(&self, _peer: Peer) -> Result<rm_proto::PoolStatus, ApiError> {
        self.engine.pool().await
    }

    async fn join_pool(
        &self,
        _peer: Peer,
        join: rm_proto::PoolJoin,
    ) -> Result<rm_proto::PoolStatus, ApiError> {
        self.engine.join_pool(join).await
    }

    async fn leave_pool(&self, _peer: Peer) -> Result<(), ApiError> {
        self.engine.leave_pool().await
    }

    async fn why(&self, _peer: Peer) -> Result<rm_proto::WhyReport, ApiError> {
        self.engine.why().await
    }

    async fn pause(&self, peer: Peer) -> Result<PauseState, ApiError> {
        self.engine.pause(peer).await
    }

    async fn resume(&self, peer: Peer) -> Result<PauseState, ApiError> {
        self.engine.resume(peer).await
    }

    async fn update_status(&self, _peer: Peer) -> Result<rm_proto::UpdateStatus, ApiError> {
        Ok(self.updater.status())
    }

    async fn update(
        &self,
        peer: Peer,
        request: rm_proto::UpdateRequest,
    ) -> Result<rm_proto::UpdateStatus, ApiError> {
        tracing::info!(%peer, apply = request.apply, "update check asked for");
        Ok(self.updater.check(request.apply).await)
    }

    async fn start_sign_in(
        &self,
        peer: Peer,
        request: SignInStart,
    ) -> Result<SignInSession, ApiError> {
        self.engine.start_sign_in(peer, request).await
    }

    async fn sign_in_status(&self, _peer: Peer) -> Result<SignInSession, ApiError> {
        self.engine.sign_in_status().await
    }

    async fn cancel_sign_in(&self, peer: Peer) -> Result<SignInSession, ApiError> {
        self.engine.cancel_sign_in(peer).await
    }
}
