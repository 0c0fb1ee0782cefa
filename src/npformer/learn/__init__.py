"""Learn by doing: the lesson's exercises, a grader that explains mistakes, and the knowledge check."""
