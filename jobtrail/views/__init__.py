"""What people read: an incident and a postmortem as one caller may see them, the terminal
timeline, and the dashboards and data source published to Grafana."""
