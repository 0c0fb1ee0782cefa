"""npformer learn: the lesson's exercises, graded."""
