import pytest

from tally_pipeline.core.verbs import verb_of


@pytest.mark.parametrize(
    ("event_type", "verb"),
    [
        ("compute.instance.create.end", "create"),
        ("compute.instance.create.start", "note"),
        ("compute.instance.create.error", "note"),
        ("compute.instance.delete.end", "delete"),
        ("compute.instance.delete.start", "note"),
        ("compute.instance.resize.confirm.end", "update"),
        ("volume.create.start", "note"),
        ("volume.create.end", "create"),
        ("volume.delete.end", "delete"),
        ("volume.resize.end", "update"),
        ("sync.create", "create"),
        ("sync.update", "update"),
        ("sync.delete", "delete"),
        ("image.create", "create"),
        ("image.activate", "update"),
        ("image.delete", "delete"),
        # delete wins over create when both tokens appear; a token must match whole
        ("snapshot.create.delete", "delete"),
        ("recreated.thing", "update"),
        ("undelete", "update"),
        ("started.thing.start", "note"),
    ],
)
def test_verb_rule(event_type: str, verb: str) -> None:
    assert verb_of(event_type) == verb
