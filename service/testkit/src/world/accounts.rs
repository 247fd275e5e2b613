//! Accounts, organizations, repositories, installations, and who may see what.

use super::*;

impl World {
    fn create_account(&mut self, login: &str, kind: AccountKind) -> Result<u64, FakeError> {
        if !valid_login(login) {
            return Err(FakeError::InvalidName(login.to_string()));
        }
        let key = login.to_ascii_lowercase();
        if self.accounts.contains_key(&key) {
            return Err(FakeError::AlreadyExists(login.to_string()));
        }
        let id = self.next_id();
        self.accounts.insert(
            key,
            Account {
                id,
                login: login.to_string(),
                kind,
                members: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    pub fn create_user(&mut self, login: &str) -> Result<u64, FakeError> {
        self.create_account(login, AccountKind::User)
    }

    pub fn create_org(&mut self, login: &str) -> Result<u64, FakeError> {
        self.create_account(login, AccountKind::Org)
    }

    pub fn account(&self, login: &str) -> Option<&Account> {
        self.accounts.get(&login.to_ascii_lowercase())
    }

    pub fn add_org_member(&mut self, org: &str, login: &str, admin: bool) -> Result<(), FakeError> {
        if self.account(login).is_none() {
            return Err(FakeError::UnknownAccount(login.to_string()));
        }
        let acc = self
            .accounts
            .get_mut(&org.to_ascii_lowercase())
            .ok_or_else(|| FakeError::UnknownAccount(org.to_string()))?;
        if acc.kind != AccountKind::Org {
            return Err(FakeError::NotAnOrg(org.to_string()));
        }
        acc.members.insert(login.to_ascii_lowercase(), admin);
        Ok(())
    }

    pub fn create_repo(&mut self, full_name: &str) -> Result<u64, FakeError> {
        let Some((owner, name)) = full_name.split_once('/') else {
            return Err(FakeError::InvalidName(full_name.to_string()));
        };
        if !valid_login(name) {
            return Err(FakeError::InvalidName(full_name.to_string()));
        }
        let owner_login = match self.account(owner) {
            Some(a) => a.login.clone(),
            None => return Err(FakeError::UnknownAccount(owner.to_string())),
        };
        let key = full_name.to_ascii_lowercase();
        if self.repos.contains_key(&key) {
            return Err(FakeError::AlreadyExists(full_name.to_string()));
        }
        let id = self.next_id();
        self.repos.insert(
            key,
            Repo {
                id,
                owner: owner_login,
                name: name.to_string(),
                collaborators: BTreeMap::new(),
                created: Utc::now(),
            },
        );
        Ok(id)
    }

    pub fn repo(&self, full_name: &str) -> Option<&Repo> {
        self.repos.get(&full_name.to_ascii_lowercase())
    }

    pub fn add_collaborator(
        &mut self,
        repo: &str,
        login: &str,
        admin: bool,
    ) -> Result<(), FakeError> {
        if self.account(login).is_none() {
            return Err(FakeError::UnknownAccount(login.to_string()));
        }
        let r = self
            .repos
            .get_mut(&repo.to_ascii_lowercase())
            .ok_or_else(|| FakeError::UnknownRepo(repo.to_string()))?;
        r.collaborators.insert(login.to_ascii_lowercase(), admin);
        Ok(())
    }

    pub fn create_installation(
        &mut self,
        account: &str,
        repos: InstallationRepos,
    ) -> Result<u64, FakeError> {
        let key = account.to_ascii_lowercase();
        if !self.accounts.contains_key(&key) {
            return Err(FakeError::UnknownAccount(account.to_string()));
        }
        if let InstallationRepos::Selected(list) = &repos {
            for r in list {
                match self.repo(r) {
                    Some(repo) if repo.owner.eq_ignore_ascii_case(account) => {}
                    _ => return Err(FakeError::UnknownRepo(r.clone())),
                }
            }
        }
        let id = self.next_id();
        self.installations.insert(
            id,
            Installation {
                id,
                account: key,
                repos,
                created: Utc::now(),
            },
        );
        Ok(id)
    }

    /// The user's permission on a repository, ignoring installations (None = cannot see it).
    pub fn user_repo_admin(&self, login: &str, repo: &Repo) -> Option<bool> {
        let l = login.to_ascii_lowercase();
        if repo.owner.eq_ignore_ascii_case(login) {
            return Some(true);
        }
        let collab = repo.collaborators.get(&l).copied();
        let member = self
            .account(&repo.owner)
            .and_then(|o| o.members.get(&l).copied());
        match (collab, member) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(false) || b.unwrap_or(false)),
        }
    }

    /// Installations the user can see: on their own account, on orgs they belong to, or covering
    /// a repository they can access (e.g. as a collaborator).
    pub fn user_installations(&self, login: &str) -> Vec<&Installation> {
        let l = login.to_ascii_lowercase();
        self.installations
            .values()
            .filter(|i| {
                i.account == l
                    || self
                        .accounts
                        .get(&i.account)
                        .is_some_and(|a| a.members.contains_key(&l))
                    || self.repos.values().any(|r| {
                        self.installation_covers(i, r) && self.user_repo_admin(login, r).is_some()
                    })
            })
            .collect()
    }

    pub fn installation_covers(&self, inst: &Installation, repo: &Repo) -> bool {
        if !repo.owner.eq_ignore_ascii_case(&inst.account) {
            return false;
        }
        match &inst.repos {
            InstallationRepos::All => true,
            InstallationRepos::Selected(list) => list
                .iter()
                .any(|r| r.eq_ignore_ascii_case(&repo.full_name())),
        }
    }

    /// Repositories an installation exposes to this user, with the user's admin bit.
    pub fn installation_repos_for(&self, inst: &Installation, login: &str) -> Vec<(&Repo, bool)> {
        self.repos
            .values()
            .filter(|r| self.installation_covers(inst, r))
            .filter_map(|r| self.user_repo_admin(login, r).map(|admin| (r, admin)))
            .collect()
    }

    pub fn repo_access(&self, login: &str, full_name: &str) -> Access {
        let Some(repo) = self.repo(full_name) else {
            return Access::NotFound;
        };
        let Some(admin) = self.user_repo_admin(login, repo) else {
            return Access::NotFound;
        };
        if !self
            .user_installations(login)
            .iter()
            .any(|i| self.installation_covers(i, repo))
        {
            return Access::NotFound;
        }
        if admin {
            Access::Admin
        } else {
            Access::NoAdmin
        }
    }

    pub fn org_access(&self, login: &str, org: &str) -> Access {
        let Some(acc) = self.account(org) else {
            return Access::NotFound;
        };
        if acc.kind != AccountKind::Org {
            return Access::NotFound;
        }
        let Some(admin) = acc.members.get(&login.to_ascii_lowercase()).copied() else {
            return Access::NotFound;
        };
        if !self
            .user_installations(login)
            .iter()
            .any(|i| i.account == org.to_ascii_lowercase())
        {
            return Access::NotFound;
        }
        if admin {
            Access::Admin
        } else {
            Access::NoAdmin
        }
    }
}
