"""The manifest stage carries what ingest found about a dialogue (its warnings) into the manifest."""

from lalm_judge.core.dialogue import Dialogue, Turn
from lalm_judge.core.files import read_json
from lalm_judge.manifest.build import build_manifest


def test_manifest_keeps_the_dialogue_warnings(tmp_path):
    warning = "turn 0: emotion 'worried' is not one of the 20 DeepDialogue labels; kept as the corpus gives it"
    turns = [Turn(0, "A", "I keep thinking about it.", "worried"), Turn(1, "B", "It will be fine.", "happy")]
    dialogue = Dialogue("d", turns, "jsonl", "corpus/dialogues.jsonl", 16000, warnings=[warning])
    dialogue.save(tmp_path / "dialogue.json")
    manifest = build_manifest(str(tmp_path / "dialogue.json"), [], {}, str(tmp_path / "d.json"))
    assert manifest["warnings"] == [warning] == read_json(tmp_path / "d.json")["warnings"]
    assert [t["emotion"] for t in manifest["turns"]] == ["worried", "happy"]
