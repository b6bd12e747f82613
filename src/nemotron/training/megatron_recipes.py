"""Moved: the recipe facts are `nemotron.training.megatron_bridge.recipes`; this name keeps old imports working."""

from nemotron.training.megatron_bridge.recipes import (
    FACTS_PATH,
    FAMILIES,
    HYBRID_FIELDS,
    HYBRID_PROVIDER,
    MOE_FIELDS,
    Family,
    check_overrides,
    class_fields,
    facts,
    literal_values,
    model_shape,
    section_class,
)

__all__ = ["FACTS_PATH", "FAMILIES", "HYBRID_FIELDS", "HYBRID_PROVIDER", "MOE_FIELDS", "Family", "check_overrides",
           "class_fields", "facts", "literal_values", "model_shape", "section_class"]
