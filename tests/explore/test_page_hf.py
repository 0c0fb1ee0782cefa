"""The explorer page of a BERT-family Hugging Face directory that is not MiniLM (tests/hf_dirs.py: a
plain bert directory with its own vocabulary), in Debian's chromium: it opens with no error and no
request, names the model by its model_type, and every view's numbers are the payload's (the checks of
test_page_real.py)."""
from test_page_real import check_views, write_page

from hf_dirs import write_plain_bert
from npformer.explore.payload import open_explorer


def test_a_plain_bert_directory_in_the_page(opened, tmp_path):
    d = write_plain_bert(tmp_path / "my-bert")
    payload = open_explorer(d).payload([{"text": "a robot picks up the red block"}, {"text": "the blue box"}])
    o = opened(write_page(tmp_path, "bert", payload))
    assert "bert: d_model 12, 3 heads of 4" in o.page.text_content("body")
    assert o.page.is_visible("#input-select") and "cosine similarity" in o.page.text_content("#summary")
    assert o.page.is_hidden("#tabs button[data-view='training']")              # a model, not a run
    check_views(o, payload)
