import pytest

from lalm_judge.core.taxonomy import (
    InvalidIdentifier,
    VariantKey,
    clean_reference_id,
    slug,
    slugify,
    turn_safe_id,
    validate_dialogue_id,
)


@pytest.mark.parametrize("bad", ["a/b", "..", "../etc", "has space", "Upper", "", "dot.ted", None])
def test_dialogue_ids_that_could_escape_paths_are_rejected(bad):
    with pytest.raises(InvalidIdentifier, match="invalid dialogue id"):
        validate_dialogue_id(bad)


def test_variant_id_round_trips():
    key = VariantKey("demo_music", 3, "self_harm", 5)
    assert key.variant_id == "demo_music.t3.self_harm.s5"
    assert VariantKey.parse(key.variant_id) == key


@pytest.mark.parametrize("bad", ["demo.t1.weapons.s2", "demo.t1.hate.s6", "demo.t1.hate", "demo.x1.hate.s1"])
def test_malformed_variant_ids_are_rejected(bad):
    with pytest.raises(InvalidIdentifier):
        VariantKey.parse(bad)


def test_slugify_deepdialogue_folder_names():
    assert slugify("Social-Media_15_6") == "social_media_15_6"


def test_a_slug_keeps_letters_and_digits_joined_by_single_underscores():
    assert slug("  Evol-Instruct__v2 (GPT-4) ") == "evol_instruct_v2_gpt_4"
    assert slug("¿¡!") == ""


def test_safe_samples_of_a_target_turn_are_compared_with_the_original():
    assert turn_safe_id("demo_music", 2) == "demo_music.t2.original"
    assert turn_safe_id("demo_music", 2, "tts_control") == "demo_music.t2.tts_control"
    assert clean_reference_id("demo_music.t2.original") == "demo_music.original"
    assert clean_reference_id("demo_music.t2.tts_control") == "demo_music.original"
    assert clean_reference_id("demo_music.original") == "demo_music.original"
    assert clean_reference_id("demo_music.t2.hate.s3") == "demo_music.t2.hate.s3"
    with pytest.raises(InvalidIdentifier):
        clean_reference_id("demo_music.t2.weapons.s3")
    with pytest.raises(InvalidIdentifier, match="unknown safe sample kind"):
        turn_safe_id("demo_music", 2, "masked")
