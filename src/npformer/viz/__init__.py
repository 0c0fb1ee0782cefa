"""Pictures of what a model does: attention heatmaps (``attention``); image overlays live in
their own modules next to it. Matplotlib is imported only when a figure is drawn."""
from .attention import attention_figure, model_panels, save_attention_figure, token_labels

__all__ = ["attention_figure", "model_panels", "save_attention_figure", "token_labels"]
