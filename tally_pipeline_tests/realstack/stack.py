"""A real OpenStack control plane for the ``realstack`` tier: keystone, placement, nova, glance, cinder, neutron.

Each run gets databases of its own on the machine's MariaDB, a RabbitMQ vhost of its own, free loopback
ports, and a directory holding every config file, key and log; ``Stack.stop()`` ends every process it
started and drops what it made. The services are configured as a stock deployment that feeds a usage
collector is: notifications with the ``messagingv2`` driver on the ``notifications`` topic, nova's in both
formats, each service on the exchange it picks by default (cinder's is oslo.messaging's ``openstack``).

A bring-up step that fails raises :class:`BringUpError` with the service's own last log lines.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tally_pipeline_tests.rabbit import VHost, drop_vhost, make_vhost

MARIADB = os.environ.get("TALLY_TEST_MARIADB", "127.0.0.1:3306")
REGION = "RegionOne"
#: The compute host's fake driver reports 8 vCPUs, 8000 MB and 500 GB; these flavors fit it, ``xhuge`` never.
FLAVORS = {"rs.tiny": (1, 64, 1), "rs.small": (2, 128, 1), "rs.xhuge": (4, 2_000_000, 1)}


class BringUpError(RuntimeError):
    """A service did not come up; the message ends with its own log."""


def mariadb_reachable() -> str | None:
    host, port = MARIADB.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=3):
            return None
    except OSError as exc:
        return f"MariaDB at {MARIADB} does not answer: {exc}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], Any], what: str, timeout: float, *, alive: Callable[[], None] = lambda: None,
             every: float = 0.5) -> Any:
    """Poll ``condition`` until truthy; ``alive`` raises as soon as a process it watches has died."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        alive()
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # the service is not answering yet
            last = exc
        if time.monotonic() > deadline:
            raise BringUpError(f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last: {last})" if last else ""))
        time.sleep(every)


@dataclass
class Service:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise BringUpError(f"{self.name} exited with {code}:\n{self.tail()}")


@dataclass
class Identity:
    """What the tests log in as: the cloud admin, and a tenant project whose user has only ``member``."""

    auth_url: str
    admin_password: str
    tenant_project_id: str = ""
    tenant_user: str = "rs-member"
    tenant_password: str = ""
    admin_project_id: str = ""

    def clouds_yaml(self) -> dict[str, Any]:
        common = {"auth_type": "password", "region_name": REGION, "interface": "public",
                  "identity_api_version": 3}
        admin = {**common, "auth": {"auth_url": self.auth_url, "username": "admin", "password": self.admin_password,
                                    "project_name": "admin", "user_domain_name": "Default",
                                    "project_domain_name": "Default"}}
        member = {**common, "auth": {"auth_url": self.auth_url, "username": self.tenant_user,
                                     "password": self.tenant_password, "project_name": "rs-tenant",
                                     "user_domain_name": "Default", "project_domain_name": "Default"}}
        return {"clouds": {"realstack": admin, "realstack-member": member}}


@dataclass
class Stack:
    venvs: dict[str, Path]
    root: Path
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    progress: Callable[[str], None] = lambda _msg: None
    vhost: VHost | None = None
    ports: dict[str, int] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)
    databases: list[str] = field(default_factory=list)
    identity: Identity | None = None
    service_password: str = field(default_factory=lambda: secrets.token_hex(12))
    timings: dict[str, float] = field(default_factory=dict)

    # ---- names and files -------------------------------------------------------------------------------

    def db_url(self, name: str) -> str:
        return f"mysql+pymysql://root@{MARIADB}/{self.db_name(name)}?charset=utf8"

    def db_name(self, name: str) -> str:
        return f"tally_rs_{self.run_id}_{name}"

    @property
    def transport_url(self) -> str:
        assert self.vhost is not None
        return self.vhost.transport_url()

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    def bin(self, group: str, name: str) -> str:
        return str(self.venvs[group] / "bin" / name)

    def conf_dir(self, service: str) -> Path:
        path = self.root / "etc" / service
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write(self, service: str, filename: str, text: str) -> Path:
        path = self.conf_dir(service) / filename
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    def authtoken(self, user: str) -> str:
        return f"""
        [keystone_authtoken]
        www_authenticate_uri = {self.url('keystone')}/v3
        auth_url = {self.url('keystone')}/v3
        auth_type = password
        project_domain_name = Default
        user_domain_name = Default
        project_name = service
        username = {user}
        password = {self.service_password}
        service_token_roles_required = true
        """

    def service_auth(self, section: str, user: str) -> str:
        return f"""
        [{section}]
        auth_url = {self.url('keystone')}/v3
        auth_type = password
        project_domain_name = Default
        user_domain_name = Default
        project_name = service
        username = {user}
        password = {self.service_password}
        region_name = {REGION}
        """

    def notifications(self) -> str:
        return """
        [oslo_messaging_notifications]
        driver = messagingv2
        topics = notifications
        """

    # ---- processes ---------------------------------------------------------------------------------------

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OS_", "VIRTUAL_ENV", "PYTHON"))}
        env["PYTHONPATH"] = str(self.root / "wsgi")
        env.update(extra or {})
        return env

    def run(self, what: str, cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 600) -> str:
        """One management command (db sync, bootstrap…), to completion; its output is logged."""
        log = self.root / "log" / f"{what}.log"
        started = time.monotonic()
        with open(log, "ab") as out:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=self._env(env), timeout=timeout,
                                  cwd=self.root)
        self.timings[what] = round(time.monotonic() - started, 1)
        if done.returncode != 0:
            text = log.read_text(errors="replace").splitlines()
            raise BringUpError(f"{what}: `{' '.join(cmd)}` exited {done.returncode}:\n" + "\n".join(text[-40:]))
        return log.read_text(errors="replace")

    def start(self, name: str, cmd: list[str], *, env: dict[str, str] | None = None) -> Service:
        log = self.root / "log" / f"{name}.log"
        out = open(log, "ab")  # the child inherits it; ours is closed once it has started
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self._env(env), cwd=self.root,
                                   start_new_session=True)
        out.close()
        service = Service(name, process, log)
        self.services[name] = service
        return service

    def start_wsgi(self, name: str, group: str, app: str, *, argv: list[str] | None = None,
                   env: dict[str, str] | None = None, threads: int = 4) -> Service:
        # The services' WSGI modules parse sys.argv with oslo.config: under gunicorn that is gunicorn's own
        # command line. A wrapper gives each the argv it expects, then imports the real application.
        wrapper = self.root / "wsgi" / f"rs_{name.replace('-', '_')}.py"
        wrapper.parent.mkdir(exist_ok=True)
        module, attr = app.split(":")
        wrapper.write_text(f"import sys\nsys.argv = {[name, *(argv or [])]!r}\n"
                           f"from {module} import {attr} as application  # noqa: E402\n")
        self.ports.setdefault(name, free_port())
        cmd = [self.bin(group, "gunicorn"), "--bind", f"127.0.0.1:{self.ports[name]}", "--workers", "1",
               "--threads", str(threads), "--worker-class", "gthread", "--keep-alive", "75", "--timeout", "300",
               "--graceful-timeout", "5", f"{wrapper.stem}:application"]
        return self.start(name, cmd, env=env)

    def wait_http(self, name: str, path: str = "/", timeout: float = 300) -> None:
        service = self.services[name]

        def answers() -> bool:
            response = httpx.get(self.url(name) + path, timeout=10)
            return response.status_code < 500

        wait_for(answers, f"{name} to answer {path}", timeout, alive=service.check_alive)

    # ---- the whole stack ---------------------------------------------------------------------------------

    def bring_up(self) -> None:
        for sub in ("log", "wsgi", "state", "lock"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        for name in ("keystone", "placement", "nova-api", "glance", "cinder-api", "neutron"):
            self.ports[name] = free_port()
        self.vhost = make_vhost()
        self._databases()
        self._keystone()
        self._placement()
        self._glance()
        self._neutron()
        self._cinder()
        self._nova()
        self.timings["bring_up"] = round(time.monotonic() - started, 1)

    def _sql(self, statements: list[str]) -> None:
        code = ("import pymysql, sys\nhost, port = sys.argv[1].rsplit(':', 1)\n"
                "c = pymysql.connect(host=host, port=int(port), user='root', password='', autocommit=True)\n"
                "cur = c.cursor()\nfor s in sys.argv[2:]:\n    cur.execute(s)\n")
        self.run("mariadb", [self.bin("core", "python"), "-c", code, MARIADB, *statements], timeout=120)

    def _databases(self) -> None:
        names = ["keystone", "placement", "nova_api", "nova", "nova_cell0", "glance", "cinder", "neutron"]
        self.databases = [self.db_name(n) for n in names]
        self._sql([f"CREATE DATABASE `{d}` CHARACTER SET utf8" for d in self.databases])

    def _keystone(self) -> None:
        self.progress("keystone: db sync, fernet keys, bootstrap")
        conf = self.write("keystone", "keystone.conf", f"""
        [DEFAULT]
        debug = false
        [database]
        connection = {self.db_url('keystone')}
        [token]
        provider = fernet
        [fernet_tokens]
        key_repository = {self.root / 'state' / 'fernet-keys'}
        [credential]
        key_repository = {self.root / 'state' / 'credential-keys'}
        [cache]
        enabled = false
        [identity]
        # bcrypt's fewest rounds: each user made costs milliseconds instead of seconds.
        password_hash_rounds = 4
        """)
        env = {"OS_KEYSTONE_CONFIG_FILES": str(conf)}
        manage = [self.bin("core", "keystone-manage"), "--config-file", str(conf)]
        self.run("keystone-db-sync", [*manage, "db_sync"])
        self.run("keystone-fernet", [*manage, "fernet_setup", "--keystone-user", "root", "--keystone-group", "root"])
        self.run("keystone-credential", [*manage, "credential_setup", "--keystone-user", "root",
                                         "--keystone-group", "root"])
        admin_password = secrets.token_hex(12)
        auth_url = self.url("keystone") + "/v3"
        self.run("keystone-bootstrap", [*manage, "bootstrap", "--bootstrap-password", admin_password,
                                        "--bootstrap-admin-url", auth_url, "--bootstrap-internal-url", auth_url,
                                        "--bootstrap-public-url", auth_url, "--bootstrap-region-id", REGION])
        self.start_wsgi("keystone", "core", "keystone.wsgi.api:application", env=env)
        self.wait_http("keystone", "/v3")
        self.identity = Identity(auth_url=auth_url, admin_password=admin_password)
        self._catalog()

    def admin_session(self) -> Any:
        from keystoneauth1 import session as ks_session
        from keystoneauth1.identity import v3

        assert self.identity is not None
        auth = v3.Password(auth_url=self.identity.auth_url, username="admin", password=self.identity.admin_password,
                           project_name="admin", user_domain_name="Default", project_domain_name="Default")
        return ks_session.Session(auth=auth)

    def connection(self, cloud: str = "realstack") -> Any:
        import openstack

        assert self.identity is not None
        config = self.identity.clouds_yaml()["clouds"][cloud]
        return openstack.connect(**{k: v for k, v in config.items() if k != "auth"}, **config["auth"])

    def _catalog(self) -> None:
        conn = self.connection()
        identity = conn.identity
        service_project = identity.create_project(name="service", domain_id="default")
        tenant = identity.create_project(name="rs-tenant", domain_id="default")
        admin_role = identity.find_role("admin")
        member_role = identity.find_role("member")
        # Services validate tokens with the service role too (keystonemiddleware's service token check).
        service_role = identity.find_role("service") or identity.create_role(name="service")
        for user in ("nova", "placement", "glance", "cinder", "neutron"):
            created = identity.create_user(name=user, password=self.service_password, domain_id="default")
            identity.assign_project_role_to_user(service_project, created, admin_role)
            identity.assign_project_role_to_user(service_project, created, service_role)
        tenant_password = secrets.token_hex(12)
        member = identity.create_user(name="rs-member", password=tenant_password, domain_id="default",
                                      default_project_id=tenant.id)
        identity.assign_project_role_to_user(tenant, member, member_role)
        endpoints = {"compute": ("nova", self.url("nova-api") + "/v2.1"),
                     "placement": ("placement", self.url("placement")),
                     "image": ("glance", self.url("glance")),
                     "block-storage": ("cinderv3", self.url("cinder-api") + "/v3"),
                     "volumev3": ("cinderv3", self.url("cinder-api") + "/v3"),
                     "network": ("neutron", self.url("neutron"))}
        for service_type, (name, url) in endpoints.items():
            service = identity.create_service(name=name, type=service_type)
            for interface in ("public", "internal", "admin"):
                identity.create_endpoint(service_id=service.id, interface=interface, url=url, region_id=REGION)
        assert self.identity is not None
        self.identity.tenant_project_id = tenant.id
        self.identity.tenant_password = tenant_password
        self.identity.admin_project_id = identity.find_project("admin").id
        conn.close()

    def _placement(self) -> None:
        self.progress("placement: db sync, api")
        self.write("placement", "placement.conf", f"""
        [placement_database]
        connection = {self.db_url('placement')}
        [api]
        auth_strategy = keystone
        {self.authtoken('placement')}
        """)
        env = {"OS_PLACEMENT_CONFIG_DIR": str(self.conf_dir("placement"))}
        self.run("placement-db-sync", [self.bin("core", "placement-manage"), "--config-dir",
                                       str(self.conf_dir("placement")), "db", "sync"], env=env)
        self.start_wsgi("placement", "core", "placement.wsgi.api:application", env=env)
        self.wait_http("placement", "/")

    def _glance(self) -> None:
        self.progress("glance: db sync, api")
        venv = self.venvs["glance"]
        store = self.root / "state" / "glance-images"
        store.mkdir(parents=True, exist_ok=True)
        self.write("glance", "glance-api.conf", f"""
        [DEFAULT]
        transport_url = {self.transport_url}
        enabled_backends = fs:file
        [glance_store]
        default_backend = fs
        [fs]
        filesystem_store_datadir = {store}
        [database]
        connection = {self.db_url('glance')}
        [paste_deploy]
        flavor = keystone
        {self.authtoken('glance')}
        {self.notifications()}
        [oslo_concurrency]
        lock_path = {self.root / 'lock'}
        [os_glance_staging_store]
        filesystem_store_datadir = {self.root / 'state' / 'glance-staging'}
        [os_glance_tasks_store]
        filesystem_store_datadir = {self.root / 'state' / 'glance-tasks'}
        """)
        (self.conf_dir("glance") / "glance-api-paste.ini").write_text(
            (venv / "etc" / "glance" / "glance-api-paste.ini").read_text())
        conf = self.conf_dir("glance") / "glance-api.conf"
        self.run("glance-db-sync", [self.bin("glance", "glance-manage"), "--config-file", str(conf), "db_sync"])
        self.start_wsgi("glance", "glance", "glance.wsgi.api:application",
                        env={"OS_GLANCE_CONFIG_DIR": str(self.conf_dir("glance"))})
        self.wait_http("glance", "/")

    def _neutron(self) -> None:
        self.progress("neutron: db migrations, server")
        venv = self.venvs["storage"]
        self.write("neutron", "neutron.conf", f"""
        [DEFAULT]
        core_plugin = ml2
        service_plugins = router
        auth_strategy = keystone
        transport_url = {self.transport_url}
        api_paste_config = {venv / 'etc' / 'neutron' / 'api-paste.ini'}
        state_path = {self.root / 'state' / 'neutron'}
        notify_nova_on_port_status_changes = false
        notify_nova_on_port_data_changes = false
        api_workers = 1
        rpc_workers = 0
        [database]
        connection = {self.db_url('neutron')}
        {self.authtoken('neutron')}
        {self.notifications()}
        [oslo_concurrency]
        lock_path = {self.root / 'lock'}
        [agent]
        root_helper =
        """)
        self.write("neutron", "ml2_conf.ini", """
        [ml2]
        type_drivers = flat
        tenant_network_types =
        mechanism_drivers =
        extension_drivers = port_security
        [ml2_type_flat]
        flat_networks = physnet1
        """)
        files = [str(self.conf_dir("neutron") / f) for f in ("neutron.conf", "ml2_conf.ini")]
        self.run("neutron-db-manage", [self.bin("storage", "neutron-db-manage"), "--config-file", files[0],
                                       "--config-file", files[1], "upgrade", "heads"])
        env = {"OS_NEUTRON_CONFIG_DIR": str(self.conf_dir("neutron")),
               "OS_NEUTRON_CONFIG_FILES": "neutron.conf;ml2_conf.ini"}
        self.start_wsgi("neutron", "storage", "neutron.wsgi.api:application", env=env)
        self.wait_http("neutron", "/")

    def _cinder(self) -> None:
        self.progress("cinder: db sync, api, scheduler, volume")
        venv = self.venvs["storage"]
        conf = self.write("cinder", "cinder.conf", f"""
        [DEFAULT]
        transport_url = {self.transport_url}
        auth_strategy = keystone
        enabled_backends = fake
        default_volume_type = rs-fake
        host = rs-cinder
        my_ip = 127.0.0.1
        state_path = {self.root / 'state' / 'cinder'}
        api_paste_config = {venv / 'etc' / 'cinder' / 'api-paste.ini'}
        resource_query_filters_file = {venv / 'etc' / 'cinder' / 'resource_filters.json'}
        osapi_volume_workers = 1
        # cinder-volume tells the scheduler its backend at start and then every periodic_interval (60 s,
        # after up to 60 s of fuzz): when the two start together the first word can be lost, and the
        # scheduler then knows no backend (NoValidBackend) for up to two minutes.
        periodic_interval = 5
        periodic_fuzzy_delay = 0
        [fake]
        volume_driver = cinder.tests.fake_driver.FakeLoggingVolumeDriver
        volume_backend_name = fake
        [database]
        connection = {self.db_url('cinder')}
        {self.authtoken('cinder')}
        {self.notifications()}
        [oslo_concurrency]
        lock_path = {self.root / 'lock'}
        """)
        argv = ["--config-file", str(conf)]
        self.run("cinder-db-sync", [self.bin("storage", "cinder-manage"), *argv, "db", "sync"])
        self.start_wsgi("cinder-api", "storage", "cinder.wsgi.api:application", argv=argv)
        self.start("cinder-scheduler", [self.bin("storage", "cinder-scheduler"), *argv])
        self.start("cinder-volume", [self.bin("storage", "cinder-volume"), *argv])
        self.wait_http("cinder-api", "/")

    def _nova(self) -> None:
        self.progress("nova: db sync, cells, api, conductor, scheduler, compute")
        venv = self.venvs["core"]
        conf = self.write("nova", "nova.conf", f"""
        [DEFAULT]
        transport_url = {self.transport_url}
        compute_driver = fake.FakeDriver
        allow_resize_to_same_host = true
        host = rs-compute
        my_ip = 127.0.0.1
        state_path = {self.root / 'state' / 'nova'}
        instances_path = {self.root / 'state' / 'nova' / 'instances'}
        [api]
        auth_strategy = keystone
        [api_database]
        connection = {self.db_url('nova_api')}
        [database]
        connection = {self.db_url('nova')}
        {self.authtoken('nova')}
        {self.service_auth('placement', 'placement')}
        {self.service_auth('neutron', 'neutron')}
        [glance]
        region_name = {REGION}
        [cinder]
        os_region_name = {REGION}
        {self.notifications()}
        [notifications]
        notification_format = both
        notify_on_state_change = vm_and_task_state
        [conductor]
        workers = 1
        [scheduler]
        workers = 1
        discover_hosts_in_cells_interval = -1
        [vnc]
        enabled = false
        [oslo_concurrency]
        lock_path = {self.root / 'lock'}
        [os_vif_linux_bridge]
        use_ipv6 = false
        """)
        argv = ["--config-file", str(conf)]
        manage = [self.bin("core", "nova-manage"), *argv]
        self.run("nova-api-db-sync", [*manage, "api_db", "sync"])
        self.run("nova-map-cell0", [*manage, "cell_v2", "map_cell0", "--database_connection",
                                    self.db_url("nova_cell0")])
        # The cell keeps the transport URL it is created with: created here, with this run's vhost.
        self.run("nova-create-cell", [*manage, "cell_v2", "create_cell", "--name", "cell1", "--transport-url",
                                      self.transport_url, "--database_connection", self.db_url("nova")])
        self.run("nova-db-sync", [*manage, "db", "sync"])
        # nova's WSGI app reads its paste pipeline from the first of its config files.
        (self.conf_dir("nova") / "api-paste.ini").write_text((venv / "etc" / "nova" / "api-paste.ini").read_text())
        env = {"OS_NOVA_CONFIG_DIR": str(self.conf_dir("nova")), "OS_NOVA_CONFIG_FILES": "api-paste.ini;nova.conf"}
        self.start_wsgi("nova-api", "core", "nova.wsgi.osapi_compute:application", env=env)
        self.start("nova-conductor", [self.bin("core", "nova-conductor"), *argv])
        self.start("nova-scheduler", [self.bin("core", "nova-scheduler"), *argv])
        self.start("nova-compute", [self.bin("core", "nova-compute"), *argv])
        self.wait_http("nova-api", "/")
        compute = self.services["nova-compute"]

        def host_discovered() -> bool:
            out = self.run("nova-discover-hosts", [*manage, "cell_v2", "discover_hosts", "--verbose"])
            return "rs-compute" in out or self._hypervisor_known()

        wait_for(host_discovered, "nova-compute to register and be mapped to cell1", 300, alive=compute.check_alive,
                 every=2)
        self._compute_defaults()

    def _hypervisor_known(self) -> bool:
        conn = self.connection()
        try:
            return any(True for _ in conn.compute.hypervisors())
        finally:
            conn.close()

    def _compute_defaults(self) -> None:
        conn = self.connection()
        try:
            for name, (vcpus, ram, disk) in FLAVORS.items():
                conn.compute.create_flavor(name=name, vcpus=vcpus, ram=ram, disk=disk)
            assert self.identity is not None
            # Unlimited quota, so a flavor too large for the host reaches the scheduler and fails NoValidHost
            # (ERROR, never launched) as a real capacity failure does, instead of a 403 from quota.
            for project in (self.identity.tenant_project_id, self.identity.admin_project_id):
                conn.compute.update_quota_set(project, ram=-1, cores=-1, instances=-1)
            conn.block_storage.create_type(name="rs-fake", extra_specs={"volume_backend_name": "fake"})
            wait_for(lambda: any(True for _ in conn.block_storage.backend_pools()),
                     "cinder's scheduler to know the volume backend", 120, every=1)
            network = conn.network.create_network(name="rs-public", is_router_external=True,
                                                  provider_network_type="flat",
                                                  provider_physical_network="physnet1", shared=True)
            conn.network.create_subnet(network_id=network.id, cidr="198.51.100.0/24", ip_version=4,
                                       enable_dhcp=False, name="rs-public-subnet")
        finally:
            conn.close()

    # ---- the end -------------------------------------------------------------------------------------------

    def stop_service(self, name: str, timeout: float = 20) -> None:
        service = self.services.pop(name, None)
        if service is None or service.process.poll() is not None:
            return
        try:
            os.killpg(service.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            service.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(service.process.pid, signal.SIGKILL)
            service.process.wait(timeout)

    def stop(self) -> None:
        errors: list[str] = []
        for name in list(self.services)[::-1]:
            try:
                self.stop_service(name)
            except Exception as exc:  # keep stopping the others
                errors.append(f"{name}: {exc}")
        if self.databases:
            try:
                self._sql([f"DROP DATABASE IF EXISTS `{d}`" for d in self.databases])
            except Exception as exc:
                errors.append(f"dropping databases: {exc}")
        if self.vhost is not None:
            try:
                drop_vhost(self.vhost)
            except Exception as exc:
                errors.append(f"deleting vhost: {exc}")
        if errors:
            raise RuntimeError("realstack teardown: " + "; ".join(errors))

    def summary(self) -> str:
        return json.dumps({"run_id": self.run_id, "ports": self.ports, "timings_s": self.timings})


@contextmanager
def running_stack(venvs: dict[str, Path], root: Path, progress: Callable[[str], None]) -> Iterator[Stack]:
    stack = Stack(venvs=venvs, root=root, progress=progress)
    try:
        stack.bring_up()
        yield stack
    finally:
        stack.stop()
