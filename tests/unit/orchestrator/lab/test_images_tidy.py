"""A rebuild removes the images it replaced, so `aidclab images` leaves no `<none>` images behind; one a
container still uses stays (docker refuses), and is counted."""

from __future__ import annotations

from dataclasses import dataclass, field

import docker.errors

from orchestrator.lab.images import image_ids, remove_replaced


@dataclass
class _Image:
    id: str


@dataclass
class _Images:
    tags: dict[str, str]
    in_use: set[str] = field(default_factory=set)
    pruned: set[str] = field(default_factory=set)  # went with their last child, as docker prunes parents
    removed: list[str] = field(default_factory=list)

    def get(self, tag: str) -> _Image:
        if tag not in self.tags:
            raise docker.errors.ImageNotFound(tag)
        return _Image(self.tags[tag])

    def remove(self, image: str) -> None:
        if image in self.pruned:
            raise docker.errors.ImageNotFound(image)
        if image in self.in_use:
            raise docker.errors.APIError(f"conflict: unable to delete {image} (must be forced)")
        self.removed.append(image)


@dataclass
class _Client:
    images: _Images


def test_replaced_images_go_children_first_and_one_in_use_stays() -> None:
    client = _Client(_Images({"base": "b1", "node": "n1", "bfr": "r1", "frr": "f1"}, in_use={"r1"}))
    before = image_ids(client, ["base", "node", "bfr", "frr", "new"])
    assert before == {"base": "b1", "node": "n1", "bfr": "r1", "frr": "f1", "new": None}
    # The rebuild: base is current (same id), the others are new images; "new" appears for the first time.
    client.images.tags.update(node="n2", bfr="r2", frr="f2", new="x1")
    removed, kept = remove_replaced(client, before)
    assert client.images.removed == ["f1", "n1"]  # the last built first: a role image before its parent
    assert (removed, kept) == (2, 1)  # r1 is still used by a container


def test_nothing_replaced_nothing_removed() -> None:
    client = _Client(_Images({"base": "b1", "node": "n1"}))
    assert remove_replaced(client, image_ids(client, ["base", "node"])) == (0, 0)
    assert client.images.removed == []


def test_a_parent_pruned_with_its_last_child_counts_as_removed_not_kept() -> None:
    client = _Client(_Images({"node": "n1", "bfr": "r1"}))
    before = image_ids(client, ["node", "bfr"])
    client.images.tags.update(node="n2", bfr="r2")
    client.images.pruned.add("n1")  # docker removed it with r1, its last child
    assert remove_replaced(client, before) == (2, 0)
