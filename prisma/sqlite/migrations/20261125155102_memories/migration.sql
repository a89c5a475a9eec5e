-- CreateTable
CREATE TABLE "Memory" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "scope" TEXT NOT NULL,
    "workspace" TEXT,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "text" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "proposedBy" TEXT NOT NULL,
    "identityId" TEXT,
    "sessionId" TEXT NOT NULL,
    "turnId" TEXT NOT NULL,
    "toolCallId" TEXT NOT NULL,
    "decidedBy" TEXT,
    "decidedAt" DATETIME,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL
);

-- CreateIndex
CREATE INDEX "Memory_platform_account_chatId_status_idx" ON "Memory"("platform", "account", "chatId", "status");

-- CreateIndex
CREATE INDEX "Memory_workspace_status_idx" ON "Memory"("workspace", "status");

-- CreateIndex
CREATE UNIQUE INDEX "Memory_turnId_toolCallId_key" ON "Memory"("turnId", "toolCallId");
