"""Confluent's JSON Schema compatibility rules (``SchemaDiff``, strict), as plain functions.

``compare(original, update)`` lists the incompatible differences between a writer's schema
(``original``) and a reader's (``update``), each as Confluent's difference name and the JSON
path where it lies. Compatible differences (a relaxed bound, a type extended from integer to
number, a property removed from an open content model, ...) are not listed.

The rules, by keyword: a bound (``maxLength``, ``maximum``, ``minItems``...) may be removed or
relaxed, never added or tightened; ``pattern`` may be removed, never added or changed;
``multipleOf`` may become a divisor of the old value; ``type`` may be extended, never narrowed
or changed; ``enum`` may grow, never shrink; a property added to an open content model
(``additionalProperties`` not false) is incompatible unless its schema is empty, one added to
a closed model is compatible unless required without a default, one covered by a partially
open model (``additionalProperties`` or ``patternProperties`` schemas) must be compatible
with what covered it; ``required`` may lose names and gain only names with a default;
array items follow the same content-model rules with ``additionalItems``; ``allOf`` may lose
subschemas, ``anyOf``/``oneOf`` may gain them, and the subschemas must match one to one;
``not`` may only get less restrictive. ``$ref`` is followed (cycles compare as compatible).

The documents are objects with ``root`` and ``resolve(ref) -> (schema, document)``
(``json_format.JsonDocument``). A comparison that takes more than ``MAX_STEPS`` steps stops
with 42201, so a hostile schema cannot keep the registry busy.
"""

from __future__ import annotations

import re
from typing import Any

from actors.schema_registry import errors

MAX_STEPS = 200_000
# Keywords that describe and never constrain.
ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "default",
        "$id",
        "id",
        "$schema",
        "$comment",
        "examples",
        "definitions",
        "$defs",
        "readOnly",
        "writeOnly",
        "deprecated",
        "format",
    }
)
COMBINERS = ("allOf", "anyOf", "oneOf")
# Combinator changes a reader can take: everything valid under the first is valid under the second.
_COMBINER_EXTENSIONS = {("allOf", "anyOf"), ("allOf", "oneOf"), ("oneOf", "anyOf")}

Found = list[tuple[str, str]]


def compare(original: Any, update: Any) -> Found:
    """The incompatible differences from writer document ``original`` to reader ``update``."""
    return _Diff().schema(original.root, original, update.root, update, "#")


def is_any(schema: Any) -> bool:
    """Whether ``schema`` accepts every document (``true`` or only annotations)."""
    return schema is True or (isinstance(schema, dict) and all(k in ANNOTATIONS for k in schema))


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _types(schema: dict) -> set[str] | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return None  # every type


def _covered(kind: str, kinds: set[str]) -> bool:
    return kind in kinds or (kind == "integer" and "number" in kinds)


def _content_model(additional: Any, patterns: Any) -> str:
    if patterns:
        return "partial"
    if additional is False:
        return "closed"
    return "open" if is_any(additional) else "partial"


class _Diff:
    def __init__(self) -> None:
        self.steps = 0
        self.active: set[tuple[int, int]] = set()

    def schema(self, o: Any, od: Any, u: Any, ud: Any, path: str) -> Found:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise errors.invalid_schema("the schemas are too complex to compare")
        o, od = self._deref(o, od)
        u, ud = self._deref(u, ud)
        key = (id(o), id(u))
        if key in self.active:
            return []  # a cycle through $ref: what lies on it is being compared already
        self.active.add(key)
        try:
            return self._schema(o, od, u, ud, path)
        finally:
            self.active.discard(key)

    def _deref(self, s: Any, doc: Any) -> tuple[Any, Any]:
        for _ in range(64):
            if not (isinstance(s, dict) and isinstance(s.get("$ref"), str)):
                return s, doc
            try:
                s, doc = doc.resolve(s["$ref"])
            except KeyError:
                return True, doc  # unresolvable refs are refused at registration
        return True, doc

    def ok(self, o: Any, od: Any, u: Any, ud: Any, path: str) -> bool:
        return not self.schema(o, od, u, ud, path)

    def _schema(self, o: Any, od: Any, u: Any, ud: Any, path: str) -> Found:
        if o is False or is_any(u):
            return []
        if u is False or is_any(o):
            return [("TYPE_NARROWED", path)]
        if not isinstance(o, dict) or not isinstance(u, dict):
            return []  # not a schema (refused at registration)
        out: Found = []
        if any(c in o or c in u for c in COMBINERS):
            done = self._combined(o, od, u, ud, path, out)
            if done:
                return out
            o = {k: v for k, v in o.items() if k not in COMBINERS}
            u = {k: v for k, v in u.items() if k not in COMBINERS}
        self._not(o, od, u, ud, path, out)
        self._enum(o, u, path, out)
        self._type(o, u, path, out)
        self._string(o, u, path, out)
        self._numeric(o, u, path, out)
        self._object(o, od, u, ud, path, out)
        self._array(o, od, u, ud, path, out)
        return out

    # -- allOf / anyOf / oneOf / not -------------------------------------------------------

    def _combined(self, o: dict, od: Any, u: dict, ud: Any, path: str, out: Found) -> bool:
        """Compare the combiners; True when nothing else of the schemas needs comparing."""
        oc = next((c for c in COMBINERS if isinstance(o.get(c), list)), None)
        uc = next((c for c in COMBINERS if isinstance(u.get(c), list)), None)
        if oc and uc:
            osubs, usubs = o[oc], u[uc]
            if oc != uc and (oc, uc) not in _COMBINER_EXTENSIONS:
                out.append(("COMBINED_TYPE_CHANGED", path))
                return True
            if uc == "allOf" and len(usubs) > len(osubs):
                out.append(("PRODUCT_TYPE_EXTENDED", path))
            elif uc != "allOf" and oc != "allOf" and len(usubs) < len(osubs):
                out.append(("SUM_TYPE_NARROWED", path))
            edges = {
                i: [j for j, us in enumerate(usubs) if self.ok(os_, od, us, ud, f"{path}/{uc}/{j}")]
                for i, os_ in enumerate(osubs)
            }
            if _matching(edges) < min(len(osubs), len(usubs)):
                out.append(("COMBINED_TYPE_SUBSCHEMAS_CHANGED", path))
            return False
        if uc in ("anyOf", "oneOf"):
            rest = {k: v for k, v in o.items()}
            if not any(self.ok(rest, od, us, ud, f"{path}/{uc}/{j}") for j, us in enumerate(u[uc])):
                out.append(("SUM_TYPE_NARROWED", path))
            return True
        if uc == "allOf":
            for j, us in enumerate(u[uc]):
                if not self.ok(o, od, us, ud, f"{path}/allOf/{j}"):
                    out.append(("PRODUCT_TYPE_EXTENDED", path))
                    break
            return True
        if oc in ("anyOf", "oneOf"):
            if not all(self.ok(os_, od, u, ud, path) for os_ in o[oc]):
                out.append(("SUM_TYPE_NARROWED", path))
            return True
        if oc == "allOf":
            if not any(self.ok(os_, od, u, ud, path) for os_ in o[oc]):
                out.append(("COMBINED_TYPE_SUBSCHEMAS_CHANGED", path))
            return True
        return False

    def _not(self, o: dict, od: Any, u: dict, ud: Any, path: str, out: Found) -> None:
        if "not" not in u:
            return
        if "not" not in o or not self.ok(u["not"], ud, o["not"], od, f"{path}/not"):
            out.append(("NOT_TYPE_EXTENDED", path))

    # -- enum / type / scalars -------------------------------------------------------------

    def _enum(self, o: dict, u: dict, path: str, out: Found) -> None:
        uvals = u["enum"] if isinstance(u.get("enum"), list) else ([u["const"]] if "const" in u else None)
        if uvals is None:
            return
        ovals = o["enum"] if isinstance(o.get("enum"), list) else ([o["const"]] if "const" in o else None)
        if ovals is None:
            out.append(("ENUM_ARRAY_NARROWED", path))
            return
        missing = [v for v in ovals if v not in uvals]
        if missing:
            added = [v for v in uvals if v not in ovals]
            out.append(("ENUM_ARRAY_CHANGED" if added else "ENUM_ARRAY_NARROWED", path))

    def _type(self, o: dict, u: dict, path: str, out: Found) -> None:
        utypes = _types(u)
        if utypes is None:
            return
        otypes = _types(o)
        if otypes is None:
            out.append(("TYPE_NARROWED", path))
            return
        lost = [t for t in otypes if not _covered(t, utypes)]
        if lost:
            gained = [t for t in utypes if not any(_covered(t, {x}) for x in otypes)]
            out.append(("TYPE_CHANGED" if gained else "TYPE_NARROWED", path))

    def _bound(self, o: dict, u: dict, key: str, name: str, upper: bool, path: str, out: Found) -> None:
        uv = _number(u.get(key))
        if uv is None:
            return
        ov = _number(o.get(key))
        if ov is None:
            out.append((f"{name}_ADDED", path))
        elif (uv < ov) if upper else (uv > ov):
            out.append((f"{name}_DECREASED" if upper else f"{name}_INCREASED", path))

    def _string(self, o: dict, u: dict, path: str, out: Found) -> None:
        self._bound(o, u, "maxLength", "MAX_LENGTH", True, path, out)
        self._bound(o, u, "minLength", "MIN_LENGTH", False, path, out)
        if isinstance(u.get("pattern"), str):
            if not isinstance(o.get("pattern"), str):
                out.append(("PATTERN_ADDED", path))
            elif o["pattern"] != u["pattern"]:
                out.append(("PATTERN_CHANGED", path))

    def _numeric(self, o: dict, u: dict, path: str, out: Found) -> None:
        self._bound(o, u, "maximum", "MAXIMUM", True, path, out)
        self._bound(o, u, "minimum", "MINIMUM", False, path, out)
        self._bound(o, u, "exclusiveMaximum", "EXCLUSIVE_MAXIMUM", True, path, out)
        self._bound(o, u, "exclusiveMinimum", "EXCLUSIVE_MINIMUM", False, path, out)
        um = _number(u.get("multipleOf"))
        if um is None or um <= 0:
            return
        om = _number(o.get("multipleOf"))
        if om is None:
            out.append(("MULTIPLE_OF_ADDED", path))
        elif om != um and not _divides(um, om):
            out.append(("MULTIPLE_OF_EXPANDED" if _divides(om, um) else "MULTIPLE_OF_CHANGED", path))

    # -- objects ---------------------------------------------------------------------------

    def _object(self, o: dict, od: Any, u: dict, ud: Any, path: str, out: Found) -> None:
        oprops = o.get("properties") if isinstance(o.get("properties"), dict) else {}
        uprops = u.get("properties") if isinstance(u.get("properties"), dict) else {}
        oreq = (
            {r for r in o.get("required", ()) if isinstance(r, str)} if isinstance(o.get("required"), list) else set()
        )
        ureq = (
            {r for r in u.get("required", ()) if isinstance(r, str)} if isinstance(u.get("required"), list) else set()
        )
        oadd, uadd = o.get("additionalProperties", True), u.get("additionalProperties", True)
        opat = o.get("patternProperties") if isinstance(o.get("patternProperties"), dict) else {}
        upat = u.get("patternProperties") if isinstance(u.get("patternProperties"), dict) else {}
        omodel, umodel = _content_model(oadd, opat), _content_model(uadd, upat)
        reported: set[str] = set()
        for name in oprops.keys() & uprops.keys():
            out += self.schema(oprops[name], od, uprops[name], ud, f"{path}/properties/{name}")
        for name in uprops.keys() - oprops.keys():
            prop = uprops[name]
            if omodel == "open":
                if not is_any(prop):
                    out.append(("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", f"{path}/properties/{name}"))
            elif omodel == "closed":
                if name in ureq and not (isinstance(prop, dict) and "default" in prop):
                    out.append(("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", f"{path}/properties/{name}"))
                    reported.add(name)
            elif not self.ok(_covering(name, oadd, opat), od, prop, ud, f"{path}/properties/{name}"):
                out.append(("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", f"{path}/properties/{name}"))
        for name in oprops.keys() - uprops.keys():
            prop = oprops[name]
            if umodel == "closed":
                if prop is not False:
                    out.append(("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", f"{path}/properties/{name}"))
            elif umodel == "partial" and not self.ok(prop, od, _covering(name, uadd, upat), ud, path):
                out.append(
                    ("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", f"{path}/properties/{name}")
                )
        for name in sorted(ureq - oreq - reported):
            prop = uprops.get(name)
            if not (isinstance(prop, dict) and "default" in prop):
                out.append(("REQUIRED_ATTRIBUTE_ADDED", f"{path}/required/{name}"))
        if oadd is False:
            pass  # anything the reader allows more is compatible
        elif uadd is False:
            out.append(("ADDITIONAL_PROPERTIES_REMOVED", path))
        elif is_any(oadd):
            if not is_any(uadd):
                out.append(("ADDITIONAL_PROPERTIES_NARROWED", path))
        elif not is_any(uadd):
            out += self.schema(oadd, od, uadd, ud, f"{path}/additionalProperties")
        for pattern in opat.keys() & upat.keys():
            out += self.schema(opat[pattern], od, upat[pattern], ud, f"{path}/patternProperties/{pattern}")
        self._bound(o, u, "maxProperties", "MAX_PROPERTIES", True, path, out)
        self._bound(o, u, "minProperties", "MIN_PROPERTIES", False, path, out)
        self._dependencies(o, od, u, ud, path, out)

    def _dependencies(self, o: dict, od: Any, u: dict, ud: Any, path: str, out: Found) -> None:
        odeps = {
            **_dict(o.get("dependencies")),
            **_dict(o.get("dependentRequired")),
            **_dict(o.get("dependentSchemas")),
        }
        udeps = {
            **_dict(u.get("dependencies")),
            **_dict(u.get("dependentRequired")),
            **_dict(u.get("dependentSchemas")),
        }
        for name, dep in udeps.items():
            where = f"{path}/dependencies/{name}"
            if isinstance(dep, list):
                old = odeps.get(name)
                if not isinstance(old, list):
                    out.append(("DEPENDENCY_ARRAY_ADDED", where))
                elif not set(dep) <= set(old):
                    out.append(
                        ("DEPENDENCY_ARRAY_EXTENDED" if set(old) <= set(dep) else "DEPENDENCY_ARRAY_CHANGED", where)
                    )
            elif name not in odeps or isinstance(odeps[name], list):
                out.append(("DEPENDENCY_SCHEMA_ADDED", where))
            else:
                out += self.schema(odeps[name], od, dep, ud, where)

    # -- arrays ----------------------------------------------------------------------------

    def _array(self, o: dict, od: Any, u: dict, ud: Any, path: str, out: Found) -> None:
        oitems, oextra = _items(o)
        uitems, uextra = _items(u)
        if oitems is None and uitems is None:
            if uextra is not True or oextra is not True:
                out += self.schema(oextra, od, uextra, ud, f"{path}/items")
        else:
            olist = oitems if oitems is not None else []
            ulist = uitems if uitems is not None else []
            for i in range(min(len(olist), len(ulist))):
                out += self.schema(olist[i], od, ulist[i], ud, f"{path}/items/{i}")
            omodel, umodel = _content_model(oextra, None), _content_model(uextra, None)
            for i in range(len(olist), len(ulist)):  # items the reader added
                where = f"{path}/items/{i}"
                if omodel == "open" and not is_any(ulist[i]):
                    out.append(("ITEM_ADDED_TO_OPEN_CONTENT_MODEL", where))
                elif omodel == "partial" and not self.ok(oextra, od, ulist[i], ud, where):
                    out.append(("ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", where))
            for i in range(len(ulist), len(olist)):  # items the reader removed
                where = f"{path}/items/{i}"
                if umodel == "closed" and olist[i] is not False:
                    out.append(("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL", where))
                elif umodel == "partial" and not self.ok(olist[i], od, uextra, ud, where):
                    out.append(("ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL", where))
            if oextra is not False:
                if uextra is False:
                    out.append(("ADDITIONAL_ITEMS_REMOVED", path))
                elif is_any(oextra) and not is_any(uextra):
                    out.append(("ADDITIONAL_ITEMS_NARROWED", path))
                elif not is_any(oextra) and not is_any(uextra):
                    out += self.schema(oextra, od, uextra, ud, f"{path}/additionalItems")
        self._bound(o, u, "maxItems", "MAX_ITEMS", True, path, out)
        self._bound(o, u, "minItems", "MIN_ITEMS", False, path, out)
        if u.get("uniqueItems") is True and o.get("uniqueItems") is not True:
            out.append(("UNIQUE_ITEMS_ADDED", path))


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _items(schema: dict) -> tuple[list | None, Any]:
    """(the positional item schemas or None, the schema of the items after them)."""
    if isinstance(schema.get("prefixItems"), list):  # 2020-12: prefixItems, then items
        return schema["prefixItems"], schema.get("items", True)
    items = schema.get("items", True)
    if isinstance(items, list):  # draft-07 tuples: items, then additionalItems
        return items, schema.get("additionalItems", True)
    return None, items


def _covering(name: str, additional: Any, patterns: dict) -> Any:
    """The schema a partially open content model gives property ``name``."""
    for pattern, schema in patterns.items():
        try:
            if re.search(pattern, name):
                return schema
        except re.error:
            continue
    return additional


def _divides(divisor: float, value: float) -> bool:
    quotient = value / divisor
    return abs(quotient - round(quotient)) < 1e-9


def _matching(edges: dict[int, list[int]]) -> int:
    """The size of a maximum matching of a bipartite graph (Kuhn's augmenting paths)."""
    match: dict[int, int] = {}

    def augment(left: int, seen: set[int]) -> bool:
        for right in edges[left]:
            if right in seen:
                continue
            seen.add(right)
            if right not in match or augment(match[right], seen):
                match[right] = left
                return True
        return False

    return sum(1 for left in edges if augment(left, set()))
