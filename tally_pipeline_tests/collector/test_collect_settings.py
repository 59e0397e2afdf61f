"""``tally collect openstack``'s settings: the config file's ``collector:`` section, the options over it, and
the transport URL read as oslo.messaging reads it, its passwords kept out of every message."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.collector.transport import TransportURLError, broker_of, parse_transport_url
from tally_pipeline.config import ConfigError, load_config
from tally_pipeline.redaction import redact


@pytest.mark.parametrize("url", [
    "rabbit://", "rabbit:///", "rabbit://h1", "rabbit://h1:5671/", "rabbit://u:p@h1:5672/vh",
    "rabbit://u:p%40ss%2F@h1,u2:p2@h2:5673/a%2Fb?ssl=1&x=2&x=3", "rabbit://u@h1/", "rabbit://u:@h1/",
    "rabbit://u:p@[::1]:5672/", "rabbit://u:p@[fe80::1]/", "rabbit://u:p@fe80::1/", "rabbit://us%3Aer:pa:ss@h/",
    "rabbit://u:p@h1:5672,h2:5672/", "rabbit://,h1/", "kafka://k1:9092",
])
def test_urls_read_as_oslo_messaging_reads_them(url: str) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from oslo_config import cfg
        from oslo_messaging import TransportURL

    theirs = TransportURL.parse(cfg.ConfigOpts(), url)
    ours = parse_transport_url(url)
    assert (ours.transport, ours.virtual_host, ours.query) == (theirs.transport, theirs.virtual_host, theirs.query)
    assert [(h.hostname, h.port, h.username, h.password) for h in ours.hosts] == [
        (h.hostname, h.port, h.username, h.password) for h in theirs.hosts]


def test_one_host() -> None:
    broker = broker_of("rabbit://tally:s3cret-one@rabbit.example:5671/cloud")
    assert broker.urls == ("amqp://tally:s3cret-one@rabbit.example:5671/cloud",)
    assert broker.display == "rabbit://tally@rabbit.example:5671/cloud"


def test_several_hosts_each_with_its_credentials_and_an_escaped_vhost() -> None:
    broker = broker_of("rabbit://u1:p%40ss@h1:5672,u2:two-pw@h2/a%2Fb")
    assert broker.urls == ("amqp://u1:p%40ss@h1:5672/a%2Fb", "amqp://u2:two-pw@h2:5672/a%2Fb")
    assert broker.display == "rabbit://u1@h1:5672,u2@h2:5672/a/b"
    assert "two-pw" not in redact("login failed for two-pw") and "p@ss" not in redact("it was p@ss")


def test_no_host_is_guest_on_localhost_like_oslo_messaging() -> None:
    assert broker_of("rabbit://").urls == ("amqp://guest:guest@localhost:5672/",)


def test_the_password_may_come_from_the_environment() -> None:
    broker = broker_of("rabbit://tally@h1:5672/", password="from-env-pw")
    assert broker.urls == ("amqp://tally:from-env-pw@h1:5672/",)
    assert "from-env-pw" not in redact("AMQP said: bad password from-env-pw")
    assert broker_of("rabbit://tally:in-url@h1/", password="from-env-pw").urls == ("amqp://tally:in-url@h1:5672/",)


@pytest.mark.parametrize("url", ["kafka://h1:9092/", "rabbit://h1:notaport/"])
def test_what_is_not_a_rabbit_transport_url_is_refused(url: str) -> None:
    with pytest.raises(TransportURLError):
        broker_of(url)


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tally.yaml"
    path.write_text(text)
    return path


def test_the_collector_section_resolves_relative_paths_and_keeps_defaults(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "collector:\n  cloud: region-one\n  buffer_dir: buf\n  token_file: t\n"))
    c = config.collector
    assert (c.cloud, c.buffer_dir, c.token_file) == ("region-one", tmp_path / "buf", tmp_path / "t")
    assert c.pool == "tally" and c.topics == ["notifications", "versioned_notifications"]
    assert c.service_exchanges == {"nova": "nova", "cinder": "openstack", "neutron": "neutron", "glance": "glance",
                                   "octavia": "octavia"}
    assert (c.amqp_durable_queues, c.amqp_auto_delete) == (False, False)  # oslo.messaging's defaults


def test_services_sharing_an_exchange_bind_it_once(tmp_path: Path) -> None:
    from tally_pipeline.collector.bus import BusSettings

    text = "collector:\n  service_exchanges: {nova: nova, cinder: openstack, glance: openstack}\n"
    pairs = tuple(load_config(_config(tmp_path, text)).collector.service_exchanges.items())
    bus = BusSettings(broker_urls=("amqp://h//",), broker="h", pool="tally", topics=("notifications",),
                      service_exchanges=pairs)
    assert bus.exchanges == ("nova", "openstack")


@pytest.mark.parametrize(("text", "says"), [
    ("collector:\n  prefetch_count: 10\n", "collector.prefetch_count: unknown key"),
    ("collector:\n  transport_url: amqp://u:hunter2@h/\n", "collector.transport_url: Value error, must be an oslo"),
    ("collector:\n  topics: [notifications, notifications]\n", "collector.topics: Value error, names a value twice"),
    ("collector:\n  exchanges: [nova, cinder]\n", "collector.exchanges: Value error, replaced by "
                                                   "collector.service_exchanges"),
    ("collector:\n  service_exchanges: {}\n", "collector.service_exchanges"),
    ("collector:\n  service_exchanges: {cinder: 'no spaces'}\n", "collector.service_exchanges"),
    ("collector:\n  service_exchanges: [nova, cinder]\n", "collector.service_exchanges"),
    ("collector:\n  cloud: 'no spaces please'\n", "collector.cloud"),
    ("collector:\n  queue_type: stream\n", "collector.queue_type"),
])
def test_a_bad_collector_section_is_named(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, text))
    assert says in str(caught.value) and "hunter2" not in str(caught.value)


def test_the_command_names_what_is_missing(tmp_path: Path) -> None:
    config = _config(tmp_path, "collector:\n  cloud: c1\n")
    result = CliRunner().invoke(main, ["collect", "openstack", "--config", str(config)],
                                env={"TALLY_COLLECTOR_TRANSPORT_URL": None, "TALLY_COLLECTOR_URL": None,
                                     "TALLY_COLLECTOR_BUFFER_DIR": None, "TALLY_COLLECTOR_CLOUD": None})
    assert result.exit_code == 1
    assert "no transport_url: give --transport-url, $TALLY_COLLECTOR_TRANSPORT_URL or collector.transport_url" \
        in result.output
    assert "no api_url" in result.output and "no buffer_dir" in result.output
    assert "no cloud" not in result.output


def test_an_option_wins_over_the_file_and_is_checked_like_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["collect", "openstack", "--cloud", "bad cloud", "--config",
                                       str(_config(tmp_path, "collector:\n  cloud: good\n"))])
    assert result.exit_code == 1 and "collector.cloud (--cloud): String should match pattern" in result.output


@pytest.mark.parametrize(("args", "says"), [
    (["--exchange", "cinder"], "collector.exchanges (--exchanges): Value error, replaced by collector.service_exchanges"),
    (["--service-exchange", "cinder"], "--service-exchange 'cinder': give SERVICE=EXCHANGE"),
    (["--service-exchange", "cinder=a", "--service-exchange", "cinder=b"], "names 'cinder' twice"),
])
def test_the_old_exchange_option_and_a_bad_service_exchange_are_named(tmp_path: Path, args: list[str],
                                                                      says: str) -> None:
    result = CliRunner().invoke(main, ["collect", "openstack", *args, "--config",
                                       str(_config(tmp_path, "collector:\n  cloud: good\n"))])
    assert result.exit_code == 1 and says in result.output, result.output


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_volume_type_names_come_from_the_clouds_cinder_when_the_config_knows_the_cloud(caplog) -> None:
    from tally_pipeline.commands.collect import volume_type_names
    from tally_pipeline.config import OpenStackCloud, SimulatedCloud
    from tally_pipeline.fakes.openstack_json import volume_type_id
    from tally_pipeline_tests.providers.openstack.openstack_cloud import config, running_fake

    with running_fake() as fake:
        entry = config(fake)
        read = volume_type_names({"region-one": entry}, "region-one")
        assert read is not None and read() == {volume_type_id("ssd"): "ssd", volume_type_id("hdd"): "hdd"}
    assert volume_type_names({"region-one": entry}, "elsewhere") is None
    assert volume_type_names({"sim": SimulatedCloud(provider="simulated")}, "sim") is None
    gone = OpenStackCloud(provider="openstack", auth={"auth_url": "http://127.0.0.1:9/v3", "username": "u",
                                                       "password": "p", "project_name": "p"},
                          timeout=1, retries=0)
    read = volume_type_names({"region-one": gone}, "region-one")
    assert read is not None and read() is None
    assert "volume types stay ids for now" in caplog.text
