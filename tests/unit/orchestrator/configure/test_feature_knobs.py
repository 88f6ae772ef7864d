"""A feature's knobs are declared once, in the node file's model (aidcnet.config), and defaulted once, in the
feature's .yml beside its plan module: the vars and plan sections take their types and bounds from the
declaration and carry no default of their own."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from aidcnet.config import Bgp, Bier, Igmp, InaJob, InaMember
from orchestrator.configure.plan.context import load_defaults
from orchestrator.configure.plan.schema import (
    BGP_KNOBS,
    BIER_KNOBS,
    IGMP_KNOBS,
    IGMP_TIMERS,
    INA_KNOBS,
    BgpVars,
    BierVars,
    IgmpVars,
    IgmpWallTimers,
    InaJobVars,
    InaVars,
    LabVars,
    PlanBgp,
    PlanBier,
    PlanIgmp,
)

FEATURES = [
    ("igmp", Igmp, IGMP_KNOBS, IgmpVars, PlanIgmp),
    ("bgp", Bgp, BGP_KNOBS, BgpVars, PlanBgp),
    ("bier", Bier, BIER_KNOBS, BierVars, PlanBier),
]


def type_and_bounds(field: FieldInfo) -> tuple[object, list[object]]:
    """A field's type and bounds, whether pydantic holds the bounds on the field or, for an optional one,
    inside ``Annotated[...] | None``."""
    if field.metadata:
        return field.annotation, list(field.metadata)
    args = [a for a in typing.get_args(field.annotation) if a is not type(None)]
    if len(args) == 1 and typing.get_origin(args[0]) is typing.Annotated:
        kind, *bounds = typing.get_args(args[0])
        return kind, bounds
    return (args[0] if len(args) == 1 else field.annotation), []


@pytest.mark.parametrize(("feature", "node", "knobs", "vars_model", "plan_model"), FEATURES)
def test_vars_and_plan_take_the_node_files_declaration(
    feature: str, node: type[BaseModel], knobs: tuple[str, ...], vars_model, plan_model
) -> None:
    for knob in knobs:
        declared = node.model_fields[knob]
        assert declared.is_required(), f"{node.__name__}.{knob}: its default belongs in plan/{feature}.yml"
        assert type_and_bounds(vars_model.model_fields[knob]) == type_and_bounds(declared)
        assert not vars_model.model_fields[knob].is_required()  # unset: the default
        assert type_and_bounds(plan_model.model_fields[knob]) == type_and_bounds(declared)
        assert plan_model.model_fields[knob].is_required(), f"{plan_model.__name__}.{knob} has a default"


def test_ina_knobs_are_the_node_files() -> None:
    for knob in INA_KNOBS:
        for model in (InaVars, InaJobVars):
            assert model.model_fields[knob].annotation == InaJob.model_fields[knob].annotation | None
        assert InaJob.model_fields[knob].is_required() and InaMember.model_fields[knob].is_required()


def test_a_bound_declared_once_holds_in_the_vars_too() -> None:
    with pytest.raises(ValidationError, match=r"igmp\.robustness"):
        LabVars.model_validate({"igmp": {"robustness": 8}})  # RFC 3376's QRV is 3 bits
    with pytest.raises(ValidationError, match=r"bgp\.hold_time"):
        LabVars.model_validate({"bgp": {"hold_time": 2}})
    with pytest.raises(ValidationError, match=r"igmp\.groups"):
        LabVars.model_validate({"igmp": {"groups": []}})


@pytest.mark.parametrize(("feature", "node", "knobs", "vars_model", "plan_model"), FEATURES)
def test_every_knob_has_its_default_in_the_features_yml(feature, node, knobs, vars_model, plan_model) -> None:
    defaults = load_defaults()
    section = getattr(defaults.values, feature)
    for knob in knobs:
        if feature == "igmp" and knob in IGMP_TIMERS:
            assert getattr(section.wall_timers, knob) is not None, f"igmp.wall_timers.{knob}"
        else:
            assert getattr(section, knob) is not None, f"{feature}.{knob} has no default"
    assert defaults.files[feature] == f"orchestrator/configure/plan/{feature}.yml"
    assert set(IgmpWallTimers.model_fields) == set(IGMP_TIMERS)
