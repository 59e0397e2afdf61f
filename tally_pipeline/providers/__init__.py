"""Providers: how reconciliation sees what a cloud really holds, one package per platform.

``interface.py`` is what every provider implements (``PlatformAdapter``, and the optional
capabilities reconciliation asks for by name); ``openstack/`` and ``simulated/`` are the two
providers, each with its own words (docs/providers.md). ``core/`` never names one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tally_pipeline.providers.interface import PlatformAdapter
    from tally_pipeline.providers.simulated.platform import PlatformView


def adapter_for(cloud_name: str, cloud_config: Any, *, platform: PlatformView | None = None) -> PlatformAdapter:
    """The adapter for one ``clouds:`` entry, chosen by its ``provider``.

    Providers are imported on demand, so one provider's missing dependency never breaks another.
    ``platform`` is for the ``simulated`` provider: list that view instead of generating one.
    """
    provider = getattr(cloud_config, "provider", None)
    if provider == "simulated":
        from tally_pipeline.providers.simulated.adapter import simulated_adapter

        return simulated_adapter(cloud_name, cloud_config, platform=platform)
    if provider == "openstack":
        from tally_pipeline.providers.openstack.adapter import OpenStackAdapter

        return OpenStackAdapter(cloud_name, cloud_config)
    from tally_pipeline.config import ConfigError  # only on this path: the providers above never need it

    raise ConfigError(f"clouds.{cloud_name}.provider: unknown provider {provider!r}; "
                      "set it to 'openstack' (a real cloud) or 'simulated' (a generated one)")
