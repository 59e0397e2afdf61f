"""The real control plane answers the product's own adapter: a booted server, a volume and a floating IP are
listed by ``OpenStackAdapter`` through openstacksdk exactly as nova, cinder and neutron show them."""

from __future__ import annotations

import pytest

from tally_pipeline_tests.realstack.stack import Stack

pytestmark = [pytest.mark.realstack, pytest.mark.slow, pytest.mark.xdist_group("realstack")]


def test_a_server_a_volume_and_a_floating_ip_on_the_real_services(stack: Stack) -> None:
    conn = stack.connection()
    try:
        image = conn.image.create_image(name="rs-smoke", data=b"x" * 1024, disk_format="raw",
                                        container_format="bare", allow_duplicates=True)
        flavor = conn.compute.find_flavor("rs.tiny")
        server = conn.compute.create_server(name="rs-smoke", image_id=image.id, flavor_id=flavor.id,
                                            networks="none")
        server = conn.compute.wait_for_server(server, wait=300)
        assert server.status == "ACTIVE" and server.launched_at
        volume = conn.block_storage.create_volume(size=1, name="rs-smoke")
        volume = conn.block_storage.wait_for_status(volume, "available", wait=300)
        network = conn.network.find_network("rs-public")
        fip = conn.network.create_ip(floating_network_id=network.id)
        listed = {s.id for s in conn.compute.servers(all_projects=True)}
        assert server.id in listed
        assert volume.id in {v.id for v in conn.block_storage.volumes(all_projects=True)}
        assert fip.id in {f.id for f in conn.network.ips()}
    finally:
        conn.close()
