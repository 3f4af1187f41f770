"""ipywidgets + plotly diagrams of the DA lab, driven live by a Lab or by a recorded trace."""
