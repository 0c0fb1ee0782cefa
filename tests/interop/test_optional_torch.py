"""torch is optional: importing npformer never imports it, and from_torch/to_torch without it
say how to install it. Each check runs in a fresh interpreter."""
import subprocess
import sys
import textwrap


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_import_npformer_does_not_import_torch():
    r = run("""
        import sys
        import npformer, npformer.nn, npformer.interop, npformer.nn.transformer
        f, g = npformer.from_torch, npformer.to_torch      # the lazy exports resolve without torch
        assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))
        print('ok')
    """)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_without_torch_from_torch_says_how_to_install_it():
    r = run("""
        import sys
        sys.modules['torch'] = None                          # as if torch were not installed
        import npformer
        from npformer.nn import EncoderLayer
        for call in (lambda: npformer.from_torch(object()), lambda: npformer.to_torch(EncoderLayer(8, 2, 16))):
            try:
                call()
            except ImportError as e:
                print(e)
            else:
                raise SystemExit('no ImportError')
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2
    for line, fn in zip(lines, ("from_torch", "to_torch"), strict=True):
        assert f"npformer.{fn} needs PyTorch" in line
        assert "pip install torch==2.13.0" in line and "pip install 'npformer[torch]'" in line
